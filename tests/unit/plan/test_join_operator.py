"""The framework join processor driven the way Spark drives it (in-memory state and timers): anti and semi joins,
outer joins over session windows merging across both sides, late elements, null keys, and each window's join."""

from __future__ import annotations

import datetime
from typing import Any

from pyspark.sql import Row

from ethereal_kafka.api.windows import (
    EventTimeSessionWindows,
    EventTimeTrigger,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    WindowAssigner,
)
from ethereal_kafka.plan.operators.join import JoinPlan, JoinProcessor, join_window
from ethereal_kafka.plan.operators.window_logic import WindowSpec
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore, run_epoch


def _ts(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def left(key: str | None, at: int, ident: str, offset: int = 0) -> Row:
    return Row(__side=0, __l=Row(k=key, id=ident), __r=None, __ts=_ts(at), __part=0, __off=offset, __key=key)


def right(key: str | None, at: int, ident: str, offset: int = 0) -> Row:
    return Row(__side=1, __l=None, __r=Row(k=key, id=ident), __ts=_ts(at), __part=0, __off=offset, __key=key)


def processor(how: str, assigner: WindowAssigner) -> tuple[JoinProcessor, FakeStore]:
    spec = WindowSpec.build(assigner, EventTimeTrigger(), 0, False, "join#4")
    proc = JoinProcessor(JoinPlan(how, spec, ("k", "id"), ("k", "id")))
    store = FakeStore()
    proc.init(FakeHandle(store))  # type: ignore[arg-type]
    return proc, store


def pairs(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    def ident(side: tuple[Any, ...] | None) -> str | None:
        return None if side is None else side[1]  # struct fields (k, id)

    return [
        (
            ident(r["__l"]),
            ident(r["__r"]),
            int(r["window_start"].timestamp() * 1000),
            int(r["window_end"].timestamp() * 1000),
        )
        for r in rows
    ]


def test_anti_join_emits_unmatched_left_elements_when_the_window_closes() -> None:
    proc, store = processor("anti", TumblingEventTimeWindows.of(10_000))
    out = run_epoch(
        proc, store, [left("a", 1_000, "l1"), left("a", 2_000, "l2"), left("b", 3_000, "l3")], 0, 0
    )
    assert out == []
    out = run_epoch(proc, store, [right("a", 4_000, "r1"), left("b", 11_000, "l4")], 0, 0)
    assert out == []
    # Watermark 10 s: window [0, 10 s) closes before the epoch's rows; b's element at 5 s is late (dropped).
    out = run_epoch(proc, store, [left("b", 5_000, "late"), left("a", 12_000, "l5")], 10_000, 0)
    assert pairs(out) == [("l3", None, 0, 10_000)]
    out = run_epoch(proc, store, [], 20_000, 0)
    assert sorted(pairs(out)) == [("l4", None, 10_000, 20_000), ("l5", None, 10_000, 20_000)]
    assert store.maps.get(("panes", "a")) in (None, {}) and not store.timers.get("a")


def test_semi_join_on_sliding_windows_emits_per_window() -> None:
    proc, store = processor("semi", SlidingEventTimeWindows.of(10_000, 5_000))
    run_epoch(proc, store, [left("a", 6_000, "l1"), right("a", 12_000, "r1"), right("a", 13_000, "r2")], 0, 0)
    out = run_epoch(proc, store, [], 20_000, 0)
    # l1 is in [0, 10 s) (no right element) and [5 s, 15 s) (two): one semi row, for the window with matches.
    assert pairs(out) == [("l1", None, 5_000, 15_000)]


def test_full_outer_join_over_sessions_merging_both_sides() -> None:
    proc, store = processor("full", EventTimeSessionWindows.with_gap(1_000))
    run_epoch(proc, store, [left("a", 1_000, "l1"), right("a", 1_500, "r1"), right("a", 5_000, "r2")], 0, 0)
    # l2 bridges nothing; r3 touches [5 s, 6 s) and merges with it.
    run_epoch(proc, store, [left("a", 8_000, "l2"), right("a", 6_000, "r3", 1)], 0, 0)
    out = run_epoch(proc, store, [], 9_500, 0)
    assert pairs(out) == [
        ("l1", "r1", 1_000, 2_500),
        (None, "r2", 5_000, 7_000),
        (None, "r3", 5_000, 7_000),
        ("l2", None, 8_000, 9_000),
    ]


def test_null_keys_never_match() -> None:
    proc, store = processor("anti", TumblingEventTimeWindows.of(10_000))
    run_epoch(proc, store, [left(None, 1_000, "l1"), right(None, 2_000, "r1")], 0, 0)
    assert pairs(run_epoch(proc, store, [], 10_000, 0)) == [("l1", None, 0, 10_000)]


def test_a_window_join_in_a_fixed_order() -> None:
    ls = [((2, 0, 0, 0, "x"), {"id": "l2"}), ((1, 0, 0, 0, "x"), {"id": "l1"})]
    rs = [((3, 0, 0, 1, "x"), {"id": "r1"})]
    assert join_window("inner", ls, rs) == [({"id": "l1"}, {"id": "r1"}), ({"id": "l2"}, {"id": "r1"})]
    assert join_window("right", [], rs) == [(None, {"id": "r1"})]
    assert join_window("left", ls, []) == [({"id": "l1"}, None), ({"id": "l2"}, None)]
    assert join_window("anti", ls, 1) == [] and join_window("semi", ls, 0) == []
