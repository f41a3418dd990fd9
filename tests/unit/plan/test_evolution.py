"""`plan.evolution.compare`: a new version's stateful operators against an app's last run, by uid (the real
descriptions of a run: `tests/integration/test_evolution.py`)."""

from __future__ import annotations

from typing import Any

from ethereal_kafka.plan.evolution import (
    CARRIED,
    CHANGED,
    DROPPED,
    LAYOUT,
    NEW,
    NO_UID,
    WATERMARKS,
    compare,
    compare_savepoint,
)


def _node(
    uid: str,
    kind: str = "rolling",
    query: str = "out",
    auto: bool = False,
    stateful: bool = True,
    nid: str | None = None,
    **detail: Any,
) -> dict[str, Any]:
    """A node as `plan.describe` gives it (`nid`: its graph id, default its uid)."""
    runs = detail.pop("runs", "framework")
    return {
        "id": f"{query}/{nid or uid}",
        "query": query,
        "kind": kind,
        "runs": runs,
        "detail": detail,
        "uid": uid,
        "auto": auto,
        "stateful": stateful,
    }


def _plan(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": [_node("map#1", "map", auto=True, stateful=False), *nodes]}


def _verdicts(findings: list[Any]) -> list[tuple[str, str, bool]]:
    return [(f.verdict, f.uid, f.blocking) for f in findings]


def test_the_same_operators_carry_their_state_whatever_else_changed() -> None:
    old = _plan(
        _node("totals", kind="rolling"),
        _node("windows", kind="window", assigner="tumbling 10 s", function="reduce add"),
    )
    new = _plan(
        _node("totals", kind="rolling"),
        _node("windows", kind="window", assigner="tumbling 10 s", function="reduce add_and_log"),
    )
    assert _verdicts(compare(old, new, 2, 2)) == [(CARRIED, "totals", False), (CARRIED, "windows", False)]


def test_a_dropped_operator_and_a_changed_one_block_with_what_changed() -> None:
    old = _plan(
        _node("totals", kind="rolling", runs="framework"),
        _node("w", kind="window", runs="spark-native", assigner="tumbling 10 s", function="agg count(1)"),
        _node(
            "j",
            kind="join",
            query="joined",
            how="inner",
            left_key=["a"],
            right_key=["a"],
            on="window tumbling 10 s",
        ),
    )
    new = _plan(
        _node(
            "w",
            kind="window",
            runs="spark-native",
            assigner="tumbling 10 s",
            function="agg count(1), sum(price)",
        ),
        _node(
            "j",
            kind="join",
            query="joined",
            how="left",
            left_key=["a"],
            right_key=["a"],
            on="window tumbling 10 s",
        ),
    )
    findings = compare(old, new)
    assert _verdicts(findings) == [(DROPPED, "totals", True), (CHANGED, "w", True), (CHANGED, "j", True)]
    assert "agg count(1) -> agg count(1), sum(price)" in findings[1].line
    assert "how inner -> left" in findings[2].line


def test_a_new_operator_starts_empty_unless_its_query_already_keeps_state() -> None:
    old = _plan(_node("totals", query="out"))
    new = _plan(_node("totals", query="out"), _node("more", query="out"), _node("elsewhere", query="alerts"))
    assert _verdicts(compare(old, new)) == [
        (CARRIED, "totals", False),
        (NEW, "more", True),
        (NEW, "elsewhere", False),
    ]


def test_an_operator_moved_to_another_engine_or_query_is_changed() -> None:
    old = _plan(
        _node("w", kind="window", runs="spark-native", assigner="tumbling 10 s", function="agg count(1)")
    )
    engine = _plan(
        _node("w", kind="window", runs="framework", assigner="tumbling 10 s", function="agg count(1)")
    )
    query = _plan(
        _node(
            "w",
            kind="window",
            runs="spark-native",
            query="other",
            assigner="tumbling 10 s",
            function="agg count(1)",
        )
    )
    assert "runs spark-native -> framework" in compare(old, engine)[0].line
    assert "query out -> other" in compare(old, query)[0].line


def test_a_position_uid_is_named_and_a_changed_sink_tasks_blocks() -> None:
    old = _plan(_node("rolling#4", auto=True))
    new = _plan(_node("rolling#4", auto=True))
    findings = compare(old, new, 2, 3)
    assert _verdicts(findings) == [
        (CARRIED, "rolling#4", False),
        (NO_UID, "rolling#4", False),
        (LAYOUT, "", True),
    ]
    assert "sink.tasks 2 -> 3" in findings[2].line


def _marks(*where: tuple[int, str | None]) -> dict[str, Any]:
    """A query `joined` with a watermark per input, `where`: (graph node id, carry key as `plan.describe` records
    it; None: not carried)."""
    return {
        "nodes": [
            _node(f"watermark#{n}", "watermark", "joined", True, False, str(n), timestamp="ts", carry_key=key)
            for n, key in where
        ]
    }


def test_watermarks_that_carry_event_time_are_matched_by_carry_key_not_position() -> None:
    old = _marks((2, "input:orders@ts"), (5, "input:payments@ts"))
    assert compare(old, _marks((2, "input:orders@ts"), (5, "input:payments@ts"))) == []
    # moved or reordered: each input still finds its own event time
    assert compare(old, _marks((3, "input:payments@ts"), (7, "input:orders@ts"))) == []
    # the payments' timestamp changed without a uid: their carried event time would be lost
    gone = compare(old, _marks((2, "input:orders@ts"), (5, "input:payments@paid_at")))
    assert _verdicts(gone) == [(WATERMARKS, "", True)]
    assert "input:payments@ts is gone (now input:orders@ts, input:payments@paid_at)" in gone[0].line
    # nothing carried before (idleness, or one watermark, or a run recorded before carry keys): nothing to keep
    assert compare(_marks((2, None), (5, None)), _marks((3, "input:payments@ts"))) == []


def test_a_savepoint_restores_by_uid_into_any_query_and_layout_but_not_what_it_cannot_seed() -> None:
    held = [("totals", "rolling", "out", {}), ("kinds", "process", "kinds", {}), ("gone", "process", "x", {})]
    new = _plan(
        _node("totals", kind="rolling", query="elsewhere"),
        _node("kinds", kind="window", query="kinds", runs="spark-native"),
        _node("fresh", kind="process"),
    )
    findings = compare_savepoint(held, new)
    assert _verdicts(findings) == [
        (CARRIED, "totals", False),
        (CHANGED, "kinds", True),
        (DROPPED, "gone", True),
        (NEW, "fresh", False),
    ]
    assert "kind process -> window" in findings[1].line and "--allow-non-restored-state" in findings[2].line
    (native,) = compare_savepoint(
        [("w", "window", "q", {})], _plan(_node("w", kind="window", runs="spark-native"))
    )
    assert native.verdict == CHANGED and "cannot seed a window" in native.line
    assert _verdicts(compare_savepoint(held[2:], _plan(), allow_non_restored=True)) == [
        (DROPPED, "gone", False)
    ]


def test_state_variables_carry_by_name_and_kind() -> None:
    """A process function's state variables (`detail.state_vars`): a new one starts empty, a changed kind blocks, one
    no longer declared is left unread over a checkpoint and dropped from a savepoint only when allowed."""
    was = {"u_total": "ValueState", "u_seen": "ListState"}
    old = _plan(_node("p", kind="process", state_vars=was))
    grown = _plan(_node("p", kind="process", state_vars={**was, "u_last": "MapState"}))
    (carried,) = compare(old, grown)
    assert carried.verdict == CARRIED and "new state 'last' (MapState) starts empty" in carried.line
    relisted = _plan(_node("p", kind="process", state_vars={**was, "u_total": "ListState"}))
    (changed,) = compare(old, relisted)
    assert (changed.verdict, changed.blocking) == (CHANGED, True)
    assert "state 'total' ValueState -> ListState" in changed.line
    shrunk = _plan(_node("p", kind="process", state_vars={"u_total": "ValueState"}))
    (left,) = compare(old, shrunk)
    assert left.verdict == CARRIED and "state 'seen' (ListState) no longer declared" in left.line
    # unknown on either side (an older description, an open() that raised outside a task): nothing compared
    assert _verdicts(compare(old, _plan(_node("p", kind="process", state_vars=None)))) == [
        (CARRIED, "p", False)
    ]

    held = [("p", "process", "out", {**was, "@timers": "TimerState"})]
    assert _verdicts(compare_savepoint(held, grown)) == [(CARRIED, "p", False)]
    (refused,) = compare_savepoint(held, relisted)
    assert (refused.verdict, refused.blocking) == (CHANGED, True) and "cannot be read" in refused.line
    (dropped,) = compare_savepoint(held, shrunk)
    assert (dropped.verdict, dropped.blocking) == (DROPPED, True) and "'seen' (ListState)" in dropped.line
    assert _verdicts(compare_savepoint(held, shrunk, allow_non_restored=True)) == [(CARRIED, "p", False)]
