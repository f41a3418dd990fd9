"""The framework window processor driven the way Spark drives it (in-memory state and timers), and its functions."""

from __future__ import annotations

import datetime
from typing import Any

from pyspark.sql import Row

from ethereal_kafka.api.functions import AggregateFunction
from ethereal_kafka.api.windows import EventTimeSessionWindows, TumblingEventTimeWindows
from ethereal_kafka.plan.operators.window import WindowPlan, WindowProcessor
from ethereal_kafka.plan.operators.window_functions import ExprAggregate, WindowFunctionSpec
from ethereal_kafka.plan.operators.window_logic import WindowSpec
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore, run_epoch

UTC = datetime.UTC
COLUMNS = ("window_start", "window_end", "n", "total", "__ts", "__key", "__tag", "__side_late")


class CountSum(AggregateFunction[dict[str, int]]):
    def create_accumulator(self) -> dict[str, int]:
        return {"n": 0, "total": 0}

    def add(self, value: dict[str, Any], accumulator: dict[str, int]) -> dict[str, int]:
        return {"n": accumulator["n"] + 1, "total": accumulator["total"] + value["amount"]}

    def get_result(self, accumulator: dict[str, int]) -> dict[str, int]:
        return accumulator

    def merge(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        return {"n": a["n"] + b["n"], "total": a["total"] + b["total"]}


def ts(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=UTC)


def row(key: str, at: int, amount: int, offset: int, partition: int = 0) -> Row:
    return Row(user=key, amount=amount, __ts=ts(at), __part=partition, __off=offset, __key=key)


def processor(assigner: Any, lateness: int = 0) -> tuple[WindowProcessor, FakeStore]:
    spec = WindowSpec.build(assigner, None, lateness, True, "window#3")
    function = WindowFunctionSpec("window#3", "aggregate", CountSum(), key_names=("user",))
    plan = WindowPlan(spec, function, ("user", "amount"), ("n", "total"), COLUMNS, "late", True)
    store = FakeStore()
    proc = WindowProcessor(plan)
    proc.init(FakeHandle(store))  # type: ignore[arg-type]
    return proc, store


def test_windows_fire_on_timers_late_firings_and_late_records_to_the_side_output() -> None:
    proc, store = processor(TumblingEventTimeWindows.of(10_000), lateness=5_000)
    out = run_epoch(proc, store, [row("a", 12_000, 2, 1), row("a", 3_000, 1, 0), row("b", 4_000, 5, 0)], 0, 0)
    assert out == []
    assert store.timers == {"a": {10_000, 15_000, 20_000, 25_000}, "b": {10_000, 15_000}}
    # Epoch 2, W = 11 s: both keys' [0, 10 s) fire from timers (b has no rows), a's late row fires it again.
    out = run_epoch(proc, store, [row("a", 9_000, 4, 2)], 11_000, 0)
    fired = [(r["__key"], r["window_start"], r["n"], r["total"], r["__tag"]) for r in out]
    assert fired == [("a", ts(0), 1, 1, None), ("a", ts(0), 2, 5, None), ("b", ts(0), 1, 5, None)]
    assert out[0]["__ts"] == ts(9_999)
    # Epoch 3, W = 16 s: [0, 10 s) is gone; a record for it is late and goes to the side output.
    out = run_epoch(proc, store, [row("a", 8_000, 9, 3)], 16_000, 0)
    assert [(r["__tag"], r["__side_late"], r["__ts"]) for r in out] == [
        ("late", {"user": "a", "amount": 9}, ts(8_000))
    ]
    assert store.maps[("panes", "b")] == {}
    assert store.timers["a"] == {20_000, 25_000}


def test_replaying_an_epoch_from_the_same_state_gives_the_same_rows() -> None:
    rows = [row("a", 1_000 + 700 * i, i, i, partition=i % 2) for i in range(8)]
    outputs = []
    for _ in range(2):
        proc, store = processor(EventTimeSessionWindows.with_gap(1_000))
        run_epoch(proc, store, list(reversed(rows)), 0, 0)
        outputs.append(run_epoch(proc, store, [], 20_000, 0))
    assert outputs[0] == outputs[1]
    assert [(r["window_start"], r["window_end"], r["n"]) for r in outputs[0]] == [(ts(1_000), ts(6_900), 8)]


def test_expression_aggregates_follow_sparks_null_rules() -> None:
    aggregates = (
        ExprAggregate("n", "count", None),
        ExprAggregate("c", "count", "x"),
        ExprAggregate("s", "sum", "x"),
        ExprAggregate("lo", "min", "x"),
        ExprAggregate("avg", "avg", "x"),
    )
    spec = WindowFunctionSpec("window#1", "exprs", aggregates=aggregates)
    contents = spec.empty()
    for value in (None, 4, 1):
        contents = spec.add(contents, {"x": value}, (0, 0, 0))
    other = spec.add(spec.empty(), {"x": None}, (0, 0, 0))
    merged = spec.merge(contents, other)
    (result,) = spec.results("k", None, merged, 0, False)  # type: ignore[arg-type]
    assert result == {"n": 4, "c": 2, "s": 5, "lo": 1, "avg": 2.5}
    (empty,) = spec.results("k", None, spec.add(spec.empty(), {"x": None}, (0, 0, 0)), 0, False)  # type: ignore[arg-type]
    assert empty == {"n": 1, "c": 0, "s": None, "lo": None, "avg": None}


def test_process_functions_get_elements_in_event_time_order_and_tuple_keys() -> None:
    seen: list[Any] = []

    def process(key: Any, context: Any, elements: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen.append(key)
        return [{"order": [e["v"] for e in elements]}]

    spec = WindowFunctionSpec("window#2", "process", process, buffer=True, key_names=("a", "b"))
    contents = spec.empty()
    for order, value in (((5, 0, 1), "late"), ((1, 1, 0), "x"), ((1, 0, 9), "w")):
        contents = spec.add(contents, {"v": value}, order)
    assert spec.results({"a": 1, "b": "z"}, None, contents, 0, False) == [{"order": ["w", "x", "late"]}]  # type: ignore[arg-type]
    assert seen == [(1, "z")]


def test_the_sessions_example_aggregate_merges_like_one_session() -> None:
    from ethereal_kafka.examples.sessions import SessionStats, clicks

    stats = SessionStats()
    events = clicks(40, users=1, seed=1, start_ms=0)
    whole = stats.create_accumulator()
    for event in events:
        whole = stats.add(event, whole)
    left, right = stats.create_accumulator(), stats.create_accumulator()
    for event in events[:17]:
        left = stats.add(event, left)
    for event in events[17:]:
        right = stats.add(event, right)
    assert stats.get_result(stats.merge(left, right)) == stats.get_result(whole)
    assert stats.get_result(whole)["clicks"] == 40


def test_a_key_without_panes_lists_no_timers_and_a_stored_pane_is_removed_in_one_call() -> None:
    """Each state call is a round trip to the JVM: a new key's timers are not listed (it has none after the
    watermark), and a pane read from state is removed without asking whether it is there."""
    proc, store = processor(TumblingEventTimeWindows.of(10))
    calls: list[str] = []
    handle, panes = proc.handle, proc.panes._state  # type: ignore[attr-defined]
    for target, name in ((handle, "listTimers"), (panes, "containsKey"), (panes, "removeKey")):
        method = getattr(target, name)
        setattr(target, name, lambda *args, _m=method, _n=name: calls.append(_n) or _m(*args))
    first = run_epoch(proc, store, [row("a", 1, 5, 0), row("a", 2, 7, 1)], watermark=0, now=0)
    assert first == [] and calls == [] and store.timers == {"a": {10}}
    fired = run_epoch(proc, store, [], watermark=10, now=0)
    assert [(r["n"], r["total"]) for r in fired] == [(2, 12)]
    assert calls == ["removeKey", "listTimers"], (
        "the fired pane's key: its timers listed, its pane removed once"
    )
    assert store.timers == {"a": set()} and not list(proc.panes.items())
