"""The process-function operator driven the way Spark drives it, over an in-memory state server: the order of
timers and elements, time modes, side outputs, TTL cleanup, and rolling aggregates."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from pyspark.sql import Row

from ethereal_kafka.api.functions import AggregateFunction, KeyedContext, KeyedProcessFunction, RuntimeContext
from ethereal_kafka.api.state import StateTtlConfig, ValueStateDescriptor
from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.api.time import Duration
from ethereal_kafka.plan.operators.base import OutputLayout
from ethereal_kafka.plan.operators.keyed_state import KeyedStateError
from ethereal_kafka.plan.operators.process import KeyedProcessor, ProcessSpec
from ethereal_kafka.plan.operators.rolling import RollingProcessor, RollingSpec
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore, run_epoch

ALERTS = OutputTag("alerts", "user string, n long")
COLUMNS = ("user", "what", "at", "__ts", "__key", "__tag", "__side_alerts")


def _row(user: str, ts: int, offset: int, amount: int = 1) -> Row:
    stamp = datetime.datetime.fromtimestamp(ts / 1000, tz=datetime.UTC)
    return Row(user=user, amount=amount, __part=0, __off=offset, __ts=stamp, __key=user)


class Recorder(KeyedProcessFunction):
    """Counts elements per key; an event-time timer 100 ms after each element reports the count."""

    def __init__(self, processing: bool = False) -> None:
        self.processing = processing

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        timers = ctx.timer_service()
        if self.processing:
            timers.register_processing_time_timer(timers.current_processing_time() + 1)
        else:
            timers.register_event_time_timer(ctx.timestamp() + 100)
        if n % 2 == 0:
            ctx.output(ALERTS, {"user": ctx.get_current_key(), "n": n})
        yield {"user": value["user"], "what": f"element {n}", "at": ctx.timestamp()}

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Any:
        yield {"user": ctx.get_current_key(), "what": f"timer {self.count.value()}", "at": timestamp}


def _processor(function: KeyedProcessFunction, mode: str = "event") -> tuple[KeyedProcessor, FakeStore]:
    layout = OutputLayout(("user", "what", "at"), ("alerts",), (("user", "n"),))
    spec = ProcessSpec("process#3", function, mode, True, ("user",), layout, COLUMNS)
    store = FakeStore()
    processor = KeyedProcessor(spec)
    processor.init(FakeHandle(store))
    return processor, store


def _main(rows: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(r["user"], r["what"], r["at"]) for r in rows if r["__tag"] is None]


def test_due_timers_fire_before_the_epochs_elements_and_late_timers_right_after() -> None:
    processor, store = _processor(Recorder())
    first = run_epoch(processor, store, [_row("a", 1_000, 0), _row("a", 1_050, 1)], watermark=0, now=5)
    assert _main(first) == [("a", "element 1", 1_000), ("a", "element 2", 1_050)]
    alerts = [r["__side_alerts"] for r in first if r["__tag"] == "alerts"]
    assert alerts == [("a", 2)]
    # Watermark 1_120: the timer at 1_100 fires first; the late element (ts 900) registers 1_000, due at once.
    second = run_epoch(processor, store, [_row("a", 900, 2)], watermark=1_120, now=6)
    assert _main(second) == [
        ("a", "timer 2", 1_100),
        ("a", "element 3", 900),
        ("a", "timer 3", 1_000),
    ]
    assert second[0]["__ts"] == datetime.datetime.fromtimestamp(1.1, tz=datetime.UTC)
    # No element for "a": its last timer fires in Spark's timer phase.
    third = run_epoch(processor, store, [], watermark=2_000, now=7)
    assert _main(third) == [("a", "timer 3", 1_150)]
    assert not store.timers.get("a") and ("_ek_timers", "a") not in store.values


def test_processing_time_timers_in_event_mode_are_refused_at_registration() -> None:
    processor, store = _processor(Recorder(processing=True))
    with pytest.raises(KeyedStateError, match="time_mode='processing'"):
        run_epoch(processor, store, [_row("a", 1_000, 0)], watermark=0, now=5)


def test_processing_mode_fires_processing_timers_and_polls_event_timers() -> None:
    processor, store = _processor(Recorder(processing=True), mode="processing")
    out = run_epoch(processor, store, [_row("b", 1_000, 0)], watermark=0, now=100, event_mode=False)
    assert _main(out) == [("b", "element 1", 1_000)]
    out = run_epoch(processor, store, [], watermark=0, now=150, event_mode=False)
    assert _main(out) == [("b", "timer 1", 101)]
    assert not store.timers.get("b")

    class EventTimers(Recorder):
        def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)
            return []

    processor, store = _processor(EventTimers(), mode="processing")
    run_epoch(processor, store, [_row("c", 1_000, 0)], watermark=0, now=100, event_mode=False)
    assert store.timers["c"] == {101}, "a poll timer for the next epoch"
    assert run_epoch(processor, store, [], watermark=500, now=200, event_mode=False) == []
    out = run_epoch(processor, store, [], watermark=1_100, now=300, event_mode=False)
    assert _main(out) == [("c", "timer None", 1_100)]
    assert not store.timers.get("c")


class Remember(KeyedProcessFunction):
    """Keeps the last element per key for 50 ms of processing time and says whether it found one."""

    def open(self, runtime_context: RuntimeContext) -> None:
        ttl = StateTtlConfig(Duration(50))
        self.last = runtime_context.get_state(ValueStateDescriptor("last", ttl))

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
        found = self.last.value()
        self.last.update(value["amount"])
        yield {
            "user": value["user"],
            "what": f"found {found}",
            "at": ctx.timer_service().current_processing_time(),
        }


@pytest.mark.parametrize("mode", ["event", "processing"])
def test_ttl_cleanup_timer_removes_state_of_keys_never_seen_again(mode: str) -> None:
    processor, store = _processor(Remember(), mode=mode)
    event = mode == "event"
    out = run_epoch(processor, store, [_row("d", 1_000, 0, 7), _row("d", 1_001, 1, 8)], 0, 100, event)
    assert [r["what"] for r in out] == ["found None", "found 7"]
    assert ("u_last", "d") in store.values
    out = run_epoch(processor, store, [_row("d", 1_002, 2, 9)], 1_000, 140, event)
    assert [r["what"] for r in out] == ["found 8"]
    # Processing time 200 >= 190: expired. The cleanup timer fires when its time domain reaches it.
    # In event time the cleanup timer waits until the watermark has moved by the time that was left (10 ms).
    run_epoch(processor, store, [], watermark=1_005, now=200, event_mode=event)
    if event:
        assert ("u_last", "d") in store.values
        run_epoch(processor, store, [], watermark=1_100, now=210, event_mode=event)
    assert ("u_last", "d") not in store.values
    assert not store.timers.get("d") and ("_ek_timers", "d") not in store.values


def test_on_timer_may_register_due_timers_which_fire_in_the_same_call() -> None:
    class Chain(Recorder):
        def on_timer(self, timestamp: int, ctx: KeyedContext) -> Any:
            if timestamp < 1_103:
                ctx.timer_service().register_event_time_timer(timestamp + 1)
            yield {"user": "e", "what": "chain", "at": timestamp}

    processor, store = _processor(Chain())
    run_epoch(processor, store, [_row("e", 1_000, 0)], 0, 1)
    out = run_epoch(processor, store, [], 2_000, 2)
    assert [r["at"] for r in out] == [1_100, 1_101, 1_102, 1_103]


def test_user_errors_name_the_operator_key_and_position() -> None:
    class Broken(Recorder):
        def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
            raise ValueError("boom")

    processor, store = _processor(Broken())
    line = Broken.process_element.__code__.co_firstlineno + 1
    with pytest.raises(
        Exception,
        match=rf"^operator process#3 at test_process_operator.py:{line}: ValueError: boom; key 'f', element from "
        r"partition 0 offset 4$",
    ):
        run_epoch(processor, store, [_row("f", 1, 4)], 0, 1)


def _rolling(kind: str, function: Any = None, field: str | None = None, names: tuple[str, ...] = ()) -> Any:
    fields = ("user", "amount") if kind != "aggregate" else ("user", "count", "total")
    spec = RollingSpec(
        "reduce#2", kind, function, field, names, OutputLayout(fields), (*fields, "__ts", "__key")
    )
    store = FakeStore()
    processor = RollingProcessor(spec)
    processor.init(FakeHandle(store))
    return processor, store


def test_rolling_sum_min_max_and_reduce_emit_one_result_per_element_in_event_time_order() -> None:
    rows = [_row("a", 30, 0, 5), _row("a", 10, 1, 7), _row("a", 20, 2, 3)]
    for kind, expected in (("sum", [7, 10, 15]), ("min", [7, 3, 3]), ("max", [7, 7, 7])):
        processor, store = _rolling(kind, field="amount")
        assert [r["amount"] for r in run_epoch(processor, store, rows, 0, 1)] == expected
        assert [r["amount"] for r in run_epoch(processor, store, [_row("a", 40, 3, 1)], 0, 2)] == [
            {"sum": 16, "min": 1, "max": 7}[kind]
        ]
    processor, store = _rolling(
        "reduce", lambda a, b: {"user": a["user"], "amount": a["amount"] * b["amount"]}
    )
    assert [r["amount"] for r in run_epoch(processor, store, rows, 0, 1)] == [7, 21, 105]


def test_rolling_aggregate_outputs_the_key_then_the_result() -> None:
    class CountSum(AggregateFunction[list[int]]):
        def create_accumulator(self) -> list[int]:
            return [0, 0]

        def add(self, value: dict[str, Any], accumulator: list[int]) -> list[int]:
            accumulator[0] += 1
            accumulator[1] += value["amount"]
            return accumulator

        def get_result(self, accumulator: list[int]) -> dict[str, int]:
            return {"count": accumulator[0], "total": accumulator[1]}

    processor, store = _rolling("aggregate", CountSum(), names=("user",))
    out = run_epoch(processor, store, [_row("a", 1, 0, 2), _row("b", 1, 1, 3), _row("a", 2, 2, 4)], 0, 1)
    assert sorted((r["user"], r["count"], r["total"]) for r in out) == [("a", 1, 2), ("a", 2, 6), ("b", 1, 3)]


def test_a_method_may_return_one_dict_a_list_or_nothing() -> None:
    class Plain(Recorder):
        def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
            if value["amount"] == 1:
                return {"user": "g", "what": "one", "at": 1}
            if value["amount"] == 2:
                return [{"user": "g", "what": "list", "at": 2}]
            return None

    processor, store = _processor(Plain())
    out = run_epoch(processor, store, [_row("g", 1, 0, 1), _row("g", 2, 1, 2), _row("g", 3, 2, 3)], 0, 1)
    assert _main(out) == [("g", "one", 1), ("g", "list", 2)]
    assert ("_ek_timers", "g") not in store.values, "a key without timers stores no book"


# -- event-time timers interleaved with a key's elements (issue 24, item 2) ----------------------------------------
BOUND = 5_000


class Slots(KeyedProcessFunction):
    """Each element asks for a timer 10 s after it; elements and timers report the watermark they saw."""

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
        timers = ctx.timer_service()
        timers.register_event_time_timer(ctx.timestamp() + 10_000)
        yield {
            "user": value["user"],
            "what": f"element wm={timers.current_watermark()}",
            "at": ctx.timestamp(),
        }

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Any:
        wm = ctx.timer_service().current_watermark()
        yield {"user": ctx.get_current_key(), "what": f"timer wm={wm}", "at": timestamp}


def _bounded(function: KeyedProcessFunction, mode: str = "event") -> tuple[KeyedProcessor, FakeStore]:
    layout = OutputLayout(("user", "what", "at"), ("alerts",), (("user", "n"),))
    spec = ProcessSpec("process#3", function, mode, True, ("user",), layout, COLUMNS, bound_ms=BOUND)
    store = FakeStore()
    processor = KeyedProcessor(spec)
    processor.init(FakeHandle(store))
    return processor, store


def test_a_keys_event_time_timers_fire_between_its_elements_as_the_watermark_advances_with_them() -> None:
    processor, store = _bounded(Slots())
    # One epoch (W = 0): before each element the watermark is max(W, its event time - bound - 1 ms).
    rows = [_row("a", 30_000, 2), _row("a", 1_000, 0), _row("a", 12_000, 1), _row("b", 40_000, 3)]
    out = run_epoch(processor, store, rows, watermark=0, now=1)
    assert _main(out) == [
        ("a", "element wm=0", 1_000),
        ("a", "element wm=6999", 12_000),
        ("a", "timer wm=24999", 11_000),
        ("a", "timer wm=24999", 22_000),
        ("a", "element wm=24999", 30_000),
        ("b", "element wm=34999", 40_000),  # another key's elements never move this key's watermark
    ]
    # Next epoch (Spark's watermark: 40 s - bound = 35 s): the element at 46 s moves a's watermark past 40 s first.
    out = run_epoch(processor, store, [_row("a", 46_000, 4)], watermark=35_000, now=2)
    assert _main(out) == [("a", "timer wm=40999", 40_000), ("a", "element wm=40999", 46_000)]
    assert store.timers == {"a": {56_000}, "b": {50_000}}


def test_interleaving_gives_the_same_firings_on_any_split_of_ordered_input_and_on_replay() -> None:
    import copy

    times = [1_000, 4_000, 9_000, 17_000, 23_000, 24_000, 41_000, 52_000, 53_000, 70_000]
    rows = [_row("a", ts, i) for i, ts in enumerate(times)]

    def run(cuts: list[int]) -> list[tuple[str, str, int]]:
        processor, store = _bounded(Slots())
        out: list[dict[str, Any]] = []
        watermark, start = 0, 0
        for end in [*cuts, len(rows)]:
            out += run_epoch(processor, store, rows[start:end], watermark=watermark, now=1)
            watermark = max(watermark, times[end - 1] - BOUND)
            start = end
        return [(u, what.split(" ")[0], at) for u, what, at in _main(out)]

    whole = run([])
    assert ("a", "timer", 11_000) in whole and whole.index(("a", "timer", 11_000)) < whole.index(
        ("a", "element", 17_000)
    )
    for cuts in ([1], [3, 6], [2, 4, 5, 8], list(range(1, 10))):
        assert run(cuts) == whole, cuts
    # A replayed epoch (the same state, rows and clocks) emits exactly the same rows.
    processor, store = _bounded(Slots())
    run_epoch(processor, store, rows[:4], watermark=0, now=1)
    saved = copy.deepcopy(store)
    first = run_epoch(processor, store, rows[4:], watermark=12_000, now=2)
    processor.init(FakeHandle(saved))
    assert run_epoch(processor, saved, list(reversed(rows[4:])), watermark=12_000, now=2) == first


def test_without_a_known_bound_timers_fire_only_at_the_epochs_watermark() -> None:
    processor, store = _processor(Slots())
    out = run_epoch(processor, store, [_row("a", 1_000, 0), _row("a", 30_000, 1)], watermark=0, now=1)
    assert _main(out) == [("a", "element wm=0", 1_000), ("a", "element wm=0", 30_000)]


def test_processing_mode_interleaves_event_time_timers_the_same_way() -> None:
    processor, store = _bounded(Slots(), mode="processing")
    out = run_epoch(processor, store, [_row("a", 1_000, 0), _row("a", 30_000, 1)], 0, 100, event_mode=False)
    assert _main(out) == [
        ("a", "element wm=0", 1_000),
        ("a", "timer wm=24999", 11_000),
        ("a", "element wm=24999", 30_000),
    ]


def test_state_restored_from_a_savepoint_goes_into_the_variables_the_processor_declares() -> None:
    """`Sequenced.handleInitialState`: each savepoint row into the state variable it names (a list's elements at
    their positions, whatever order they come in), timers registered; a variable this version lacks is refused."""
    from ethereal_kafka.plan.operators.base import TIMERS_VAR, RestoreError, Sequenced

    class Declares:
        def init(self, handle: Any) -> None:
            handle.getValueState("u_count", "v binary")
            handle.getListState("u_recent", "v binary")
            handle.getMapState("u_buckets", "k binary", "v binary")

    store = FakeStore()
    sequenced = Sequenced(Declares(), ("x",), "process#3 (uid kinds)")
    sequenced.init(FakeHandle(store))
    store.key = "u1"
    rows = [
        {"var": "u_count", "map_key": None, "ordinal": None, "value": b"3"},
        {"var": "u_recent", "map_key": None, "ordinal": 1, "value": b"b"},
        {"var": "u_recent", "map_key": None, "ordinal": 0, "value": b"a"},
        {"var": "u_buckets", "map_key": b"k", "ordinal": None, "value": b"v"},
        {"var": TIMERS_VAR, "map_key": None, "ordinal": 99, "value": None},
    ]
    for row in rows:
        sequenced.handleInitialState(("u1",), row, None)
    assert store.values[("u_count", "u1")] == (b"3",)
    assert store.lists[("u_recent", "u1")] == [(b"a",), (b"b",)]
    assert store.maps[("u_buckets", "u1")] == {(b"k",): (b"v",)}
    assert store.timers["u1"] == {99}

    # A namespaced map's key (`n binary, k binary`) comes packed, each field length-prefixed.
    class Namespaced:
        def init(self, handle: Any) -> None:
            handle.getMapState("_ek_ns", "n binary, k binary", "v binary")

    spaced = Sequenced(Namespaced(), ("x",))
    spaced.init(FakeHandle(store))
    packed = len(b"user").to_bytes(4, "big") + b"user" + len(b"").to_bytes(4, "big")
    spaced.handleInitialState(
        ("u1",), {"var": "_ek_ns", "map_key": packed, "ordinal": None, "value": b"v"}, None
    )
    assert store.maps[("_ek_ns", "u1")] == {(b"user", b""): (b"v",)}
    with pytest.raises(RestoreError, match=r"process#3 \(uid kinds\): the savepoint holds state 'u_gone'"):
        sequenced.handleInitialState(
            ("u1",), {"var": "u_gone", "map_key": None, "ordinal": None, "value": b""}, None
        )
