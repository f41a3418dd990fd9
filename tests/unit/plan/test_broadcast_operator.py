"""The broadcast operator driven the way Spark drives it, over an in-memory state server: every bucket folds the
same broadcast elements, in the connected order, into its own copy of the broadcast state; `process_element`
reads it and may not write it; `apply_to_keyed_state` visits every key a bucket has seen."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from pyspark.sql import Row

from ethereal_kafka.api import (
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
    MapStateDescriptor,
    RuntimeContext,
    ValueStateDescriptor,
)
from ethereal_kafka.api.graph import OperatorRef
from ethereal_kafka.api.state import StateTtlConfig
from ethereal_kafka.api.time import Duration
from ethereal_kafka.plan.broadcast import has_timers
from ethereal_kafka.plan.errors import UserFunctionError
from ethereal_kafka.plan.operators.base import OutputLayout
from ethereal_kafka.plan.operators.broadcast import BroadcastProcessor, BroadcastSpec, BroadcastStateError
from ethereal_kafka.plan.user_errors import OperatorErrors
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore, run_epoch

RULES = MapStateDescriptor("rules")
COUNT = ValueStateDescriptor("count")
COLUMNS = ("user", "what", "__ts", "__key")
BUCKETS = 3


def _stamp(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _event(user: str, ts: int, offset: int, amount: int, bucket: int) -> Row:
    return Row(
        __input=1,
        __in1=Row(user=user, amount=amount),
        __in2=None,
        __part=0,
        __off=offset,
        __ts=_stamp(ts),
        __key=bucket,
        __ukey=user,
    )


def _rule(ts: int, offset: int, op: str, limit: int = 0) -> list[Row]:
    """One broadcast element, replicated to every bucket (as the compiler does)."""
    return [
        Row(
            __input=2,
            __in1=None,
            __in2=Row(op=op, max=limit),
            __part=0,
            __off=offset,
            __ts=_stamp(ts),
            __key=bucket,
            __ukey=None,
        )
        for bucket in range(BUCKETS)
    ]


class Detector(KeyedBroadcastProcessFunction):
    """Counts a user's events; an event over the rule's `max` is an alert; rule `reset` clears every count."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(COUNT)

    def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        limit = ctx.get_broadcast_state(RULES).get("max")
        verdict = "alert" if limit is not None and value["amount"] > limit else "ok"
        yield {"user": ctx.get_current_key(), "what": f"{verdict} n={n}"}

    def process_broadcast_element(self, value: dict[str, Any], ctx: Any) -> Any:
        if value["op"] == "set":
            ctx.get_broadcast_state(RULES).put("max", value["max"])
        elif value["op"] == "remove":
            ctx.get_broadcast_state(RULES).remove("max")
        else:
            ctx.apply_to_keyed_state(COUNT, lambda key, state: state.clear())
        yield {"user": None, "what": f"rule {value['op']} {value['max']}"}


def _processor(
    function: Any, keyed: bool = True, mode: str | None = None, on_error: OperatorErrors | None = None
) -> tuple[BroadcastProcessor, FakeStore]:
    fields = ("user",) if keyed else ()
    spec = BroadcastSpec(
        "broadcast#4",
        function,
        keyed,
        ("rules",),
        fields,
        OutputLayout(("user", "what")),
        COLUMNS,
        mode=mode,
        event_time=True,
        bound_ms=0 if mode else None,
        on_error=on_error,
    )
    store = FakeStore()
    processor = BroadcastProcessor(spec)
    processor.init(FakeHandle(store))
    return processor, store


def _whats(rows: list[dict[str, Any]]) -> list[tuple[Any, str]]:
    return [(r["user"], r["what"]) for r in rows]


def test_a_rule_decides_from_the_next_element_on_in_every_bucket_and_broadcast_output_is_emitted_once() -> (
    None
):
    processor, store = _processor(Detector())
    rows = [
        *_rule(10, 0, "set", 50),
        _event("a", 20, 0, 60, bucket=0),
        _event("b", 20, 1, 60, bucket=1),
        *_rule(30, 1, "set", 100),
        _event("a", 40, 2, 60, bucket=0),
        _event("b", 40, 3, 60, bucket=1),
    ]
    out = _whats(run_epoch(processor, store, rows, 0, 1))
    assert sorted(w for u, w in out if u == "a") == ["alert n=1", "ok n=2"]
    assert sorted(w for u, w in out if u == "b") == ["alert n=1", "ok n=2"], "bucket 1 keeps the same rules"
    assert sorted(w for u, w in out if u is None) == ["rule set 100", "rule set 50"], (
        "once, not once per bucket"
    )
    # The next epoch starts from the stored broadcast state (every bucket's copy), then a removal.
    epoch = [_event("b", 50, 4, 200, bucket=1), _event("c", 55, 5, 200, bucket=2), *_rule(60, 2, "remove")]
    epoch.append(_event("c", 70, 6, 200, bucket=2))
    out = _whats(run_epoch(processor, store, epoch, 0, 2))
    assert ("b", "alert n=3") in out and ("c", "alert n=1") in out, "bucket 2 saw the rules of epoch 1 too"
    assert ("c", "ok n=2") in out, "removed from the next element on"


def test_a_replayed_epoch_starts_from_the_state_as_of_its_start_and_gives_the_same_output() -> None:
    processor, store = _processor(Detector())
    run_epoch(processor, store, [*_rule(10, 0, "set", 50), _event("a", 20, 0, 60, bucket=0)], 0, 1)
    before = copy.deepcopy(store)
    epoch = [_event("a", 35, 1, 70, bucket=0), *_rule(30, 1, "set", 80), _event("c", 40, 2, 90, bucket=2)]
    first = run_epoch(processor, store, epoch, 0, 2)
    replay_processor, _ = _processor(Detector())
    replay_processor.init(FakeHandle(before))
    again = run_epoch(replay_processor, before, list(reversed(epoch)), 0, 2)
    assert sorted(_whats(first), key=repr) == sorted(_whats(again), key=repr)
    assert ("a", "ok n=2") in _whats(first), "the rule at 30 came before the element at 35"


def test_apply_to_keyed_state_visits_every_key_a_bucket_has_seen() -> None:
    processor, store = _processor(Detector())
    run_epoch(
        processor, store, [_event("a", 1, 0, 1, 0), _event("b", 2, 1, 1, 0), _event("c", 3, 2, 1, 1)], 0, 1
    )
    run_epoch(processor, store, _rule(10, 0, "reset"), 0, 2)  # no keyed element in this epoch
    out = _whats(run_epoch(processor, store, [_event("a", 20, 3, 1, 0), _event("c", 21, 4, 1, 1)], 0, 3))
    assert sorted(out) == [("a", "ok n=1"), ("c", "ok n=1")]


def test_writing_broadcast_state_in_process_element_fails_naming_the_operator() -> None:
    class Writer(Detector):
        def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
            ctx.get_broadcast_state(RULES).put("max", 1)

    processor, store = _processor(Writer())
    with pytest.raises(
        BroadcastStateError, match=r"^broadcast#4: process_element wrote broadcast state 'rules'"
    ):
        run_epoch(processor, store, [_event("a", 1, 0, 1, 0)], 0, 1)


def test_unknown_broadcast_state_timers_and_keyed_state_without_keys_are_refused() -> None:
    class Unknown(Detector):
        def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
            ctx.get_broadcast_state(MapStateDescriptor("other"))

    processor, store = _processor(Unknown())
    with pytest.raises(BroadcastStateError, match="no broadcast state 'other'"):
        run_epoch(processor, store, [_event("a", 1, 0, 1, 0)], 0, 1)

    class Timer(Detector):
        def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
            ctx.timer_service()

    processor, store = _processor(Timer())
    with pytest.raises(BroadcastStateError, match="defines no on_timer"):
        run_epoch(processor, store, [_event("a", 1, 0, 1, 0)], 0, 1)

    class Plain(BroadcastProcessFunction):
        def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
            yield {"user": value["user"], "what": str(ctx.get_broadcast_state(RULES).get("max"))}

        def process_broadcast_element(self, value: dict[str, Any], ctx: Any) -> Any:
            ctx.apply_to_keyed_state(COUNT, lambda key, state: None)

    processor, store = _processor(Plain(), keyed=False)
    assert _whats(run_epoch(processor, store, [_event("a", 1, 0, 1, 0)], 0, 1)) == [("a", "None")]
    with pytest.raises(BroadcastStateError, match="apply_to_keyed_state needs keyed state"):
        run_epoch(processor, store, _rule(5, 0, "reset"), 0, 2)


def test_an_output_of_the_wrong_type_fails_in_one_line_naming_the_operator() -> None:
    class Wrong(Detector):
        def process_broadcast_element(self, value: dict[str, Any], ctx: Any) -> Any:
            yield {"rule": 1}

    processor, store = _processor(Wrong())
    with pytest.raises(
        Exception, match=r"^broadcast#4: the element yielded for broadcast element from partition 0"
    ) as failure:
        run_epoch(processor, store, _rule(5, 0, "set", 1), 0, 1)
    assert "\n" not in str(failure.value)


class Watcher(Detector):
    """Detector that also calls a key back 100 ms after each of its events, reporting its count and the rule then."""

    def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
        yield from super().process_element(value, ctx)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        rule = ctx.get_broadcast_state(RULES).get("max")
        yield {"user": ctx.get_current_key(), "what": f"timer {timestamp} n={self.count.value()} max={rule}"}


def test_timers_fire_per_user_key_in_time_order_between_the_rows_and_survive_a_restart() -> None:
    processor, store = _processor(Watcher(), mode="event")
    first = [
        *_rule(10, 0, "set", 50),
        _event("a", 20, 0, 60, 0),
        _event("b", 30, 1, 1, 0),
        _event("c", 25, 2, 1, 1),
    ]
    assert all("timer" not in w for _, w in _whats(run_epoch(processor, store, first, 0, 1)))
    assert store.timers == {0: {120, 130}, 1: {125}}, "one bucket's Spark timers: the union of its keys'"
    # Rows move bucket 0's watermark: a's timer (120) fires before the rule at 125, b's (130) after it and
    # before a's next event; c's (125) waits in bucket 1 where no row passes it.
    second = [_event("a", 200, 3, 1, 0), *_rule(125, 1, "set", 70)]
    out = [(u, w) for u, w in _whats(run_epoch(processor, store, second, 100, 2)) if u is not None]
    assert out == [("a", "timer 120 n=1 max=50"), ("b", "timer 130 n=1 max=70"), ("a", "ok n=2")]
    # A new task (a restart) on the stored state: the watermark passes c's timer and a's second.
    restarted, _ = _processor(Watcher(), mode="event")
    restarted.init(FakeHandle(store))
    out = _whats(run_epoch(restarted, store, [], 300, 3))
    assert sorted(out) == [("a", "timer 300 n=2 max=70"), ("c", "timer 125 n=1 max=70")]
    assert not any(store.timers.values()), "every timer fired and none is left registered"
    assert not any(name == "_ek_timers" for name, _ in store.maps if store.maps[(name, _)]), "books deleted"


def test_timers_of_equal_time_fire_in_key_order_and_a_replay_fires_the_same() -> None:
    rows = [_event("b", 20, 0, 1, 0), _event("a", 20, 1, 1, 0), _event("z", 500, 2, 1, 0)]
    outputs = set()
    for order in (rows, list(reversed(rows))):
        processor, store = _processor(Watcher(), mode="event")
        outputs.add(tuple(_whats(run_epoch(processor, store, order, 0, 1))))
    # Elements by offset at equal time (b, a); the two timers at 120 by key (a, b), before z's element at 500.
    expected = ["b ok n=1", "a ok n=1", "a timer 120 n=1 max=None", "b timer 120 n=1 max=None", "z ok n=1"]
    assert outputs == {tuple(tuple(e.split(" ", 1)) for e in expected)}


def test_only_a_function_with_its_own_on_timer_runs_with_spark_timers() -> None:
    assert has_timers(Watcher()) and not has_timers(Detector())


def test_timers_are_refused_in_process_broadcast_element_and_without_keys() -> None:
    class OnRule(Watcher):
        def process_broadcast_element(self, value: dict[str, Any], ctx: Any) -> Any:
            ctx.timer_service()

    processor, store = _processor(OnRule(), mode="event")
    with pytest.raises(BroadcastStateError, match="process_broadcast_element has no current key"):
        run_epoch(processor, store, _rule(1, 0, "set", 1), 0, 1)

    class Plain(BroadcastProcessFunction):
        def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
            ctx.timer_service()

        def process_broadcast_element(self, value: dict[str, Any], ctx: Any) -> Any:
            return None

    processor, store = _processor(Plain(), keyed=False, mode=None)
    with pytest.raises(BroadcastStateError, match="timers belong to a key"):
        run_epoch(processor, store, [_event("a", 1, 0, 1, 0)], 0, 1)


class Remember(Watcher):
    """Keeps a key's count for 50 ms of processing time; no timers of its own (on_timer arms the operator's)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", StateTtlConfig(Duration(50))))

    def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
        yield from Detector.process_element(self, value, ctx)


def test_the_ttl_cleanup_timer_removes_keyed_state_of_keys_never_seen_again() -> None:
    processor, store = _processor(Remember(), mode="processing")
    run_epoch(processor, store, [_event("a", 1, 0, 1, 0), _event("b", 2, 1, 1, 0)], 0, 100, event_mode=False)
    assert len(store.maps[("u_count", 0)]) == 2
    assert store.timers[0] == {150}, "one cleanup timer per bucket time, armed per key"
    run_epoch(processor, store, [], 0, 150, event_mode=False)
    assert not store.maps.get(("u_count", 0)), "both keys' expired counts deleted without being read"
    assert not store.timers.get(0)


class Fussy(Detector):
    """Detector that raises on an amount of 13, after emitting."""

    def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
        yield from super().process_element(value, ctx)
        if value["amount"] == 13:
            raise ValueError("unlucky")


def test_on_user_error_skip_drops_the_failing_elements_rows_and_goes_on() -> None:
    policy = OperatorErrors("skip", OperatorRef("broadcast#4", "rules", "rules-4"))
    processor, store = _processor(Fussy(), on_error=policy)
    rows = [_event("a", 1, 0, 13, 0), _event("a", 2, 1, 1, 0)]
    assert _whats(run_epoch(processor, store, rows, 0, 1)) == [("a", "ok n=2")], (
        "no row from the skipped element; its state change stays, as in the process operator"
    )
    processor, store = _processor(Fussy())
    with pytest.raises(
        UserFunctionError, match=r"^operator broadcast#4 .*unlucky; element from partition 0 offset 0"
    ):
        run_epoch(processor, store, rows, 0, 1)

    class BadRule(Detector):
        def process_broadcast_element(self, value: dict[str, Any], ctx: Any) -> Any:
            raise ValueError("bad rule")

    processor, store = _processor(BadRule(), on_error=policy)
    with pytest.raises(UserFunctionError, match="bad rule"):
        run_epoch(processor, store, _rule(1, 0, "set", 1), 0, 1)
