"""The keyed co-process operator driven the way Spark drives it, over an in-memory state server: both inputs share
a key's state and timers, each gets its own method, and the two inputs meet in the connected order (event time,
then input, then partition and offset) whatever order Spark hands the rows in."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pytest
from pyspark.sql import Row

from ethereal_kafka.api.functions import (
    CoProcessFunction,
    KeyedContext,
    KeyedCoProcessFunction,
    RuntimeContext,
)
from ethereal_kafka.api.state import ValueStateDescriptor
from ethereal_kafka.plan.operators.base import OutputLayout
from ethereal_kafka.plan.operators.coprocess import CoKeyedProcessor, connected_order
from ethereal_kafka.plan.operators.keyed_state import KeyedStateError
from ethereal_kafka.plan.operators.process import ProcessSpec
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore, run_epoch

COLUMNS = ("user", "what", "__ts", "__key")


def _stamp(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _event(user: str, ts: int, offset: int, amount: int) -> Row:
    return Row(
        __input=1,
        __in1=Row(user=user, amount=amount),
        __in2=None,
        __part=0,
        __off=offset,
        __ts=_stamp(ts),
        __key=user,
    )


def _limit(user: str, ts: int, offset: int, limit: int) -> Row:
    return Row(
        __input=2,
        __in1=None,
        __in2=Row(account=user, limit=limit),
        __part=1,
        __off=offset,
        __ts=_stamp(ts),
        __key=user,
    )


class Limits(KeyedCoProcessFunction):
    """Input 2 sets a key's limit; input 1's amounts over it are flagged; a timer 100 ms after a flag reports it."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.limit = runtime_context.get_state(ValueStateDescriptor("limit"))
        self.flags = runtime_context.get_state(ValueStateDescriptor("flags"))

    def process_element1(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
        limit = self.limit.value()
        if limit is not None and value["amount"] > limit:
            self.flags.update((self.flags.value() or 0) + 1)
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)
            yield {"user": value["user"], "what": f"over {value['amount']}>{limit}"}
        else:
            yield {"user": value["user"], "what": f"ok {value['amount']}"}

    def process_element2(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
        self.limit.update(value["limit"])
        yield {"user": value["account"], "what": f"limit {value['limit']}"}

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Any:
        yield {"user": ctx.get_current_key(), "what": f"flags {self.flags.value()} at {timestamp}"}


def _processor() -> tuple[CoKeyedProcessor, FakeStore]:
    spec = ProcessSpec(
        "coprocess#5", Limits(), "event", True, ("user",), OutputLayout(("user", "what")), COLUMNS
    )
    store = FakeStore()
    processor = CoKeyedProcessor(spec)
    processor.init(FakeHandle(store))
    return processor, store


def _whats(rows: list[dict[str, Any]]) -> list[str]:
    return [r["what"] for r in rows]


def test_both_inputs_share_the_keys_state_and_timers() -> None:
    processor, store = _processor()
    out = run_epoch(
        processor, store, [_limit("a", 10, 0, 5), _event("a", 20, 0, 7), _event("a", 30, 1, 3)], 0, 1
    )
    assert _whats(out) == ["limit 5", "over 7>5", "ok 3"]
    out = run_epoch(processor, store, [_limit("a", 200, 1, 10), _event("a", 210, 2, 7)], 150, 2)
    assert _whats(out) == ["flags 1 at 120", "limit 10", "ok 7"], (
        "the timer set by input 1 fires; input 2 reads"
    )


def test_inputs_meet_by_event_time_then_input_then_offset_whatever_order_spark_hands_them() -> None:
    rows = [_event("a", 20, 0, 7), _limit("a", 20, 0, 5), _limit("a", 10, 1, 100), _event("a", 20, 1, 6)]
    outputs = set()
    for permutation in itertools.permutations(rows):
        processor, store = _processor()
        outputs.add(tuple(_whats(run_epoch(processor, store, list(permutation), 0, 1))))
    # ts 10 (limit 100) first; at ts 20 input 1 (offsets 0, 1) before input 2 (limit 5).
    assert outputs == {("limit 100", "ok 7", "ok 6", "limit 5")}


def test_connected_order_ranks_event_time_before_input_and_input_before_position() -> None:
    early_second = _limit("a", 5, 9, 1).asDict(recursive=True)
    late_first = _event("a", 6, 0, 1).asDict(recursive=True)
    same_time_first = _event("a", 5, 99, 1).asDict(recursive=True)
    ordered = sorted([late_first, early_second, same_time_first], key=connected_order)
    assert ordered == [same_time_first, early_second, late_first]


def test_an_output_of_the_wrong_type_fails_naming_the_operator() -> None:
    class Wrong(Limits):
        def process_element2(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
            yield {"user": value["account"], "bogus": 1}

    spec = ProcessSpec(
        "coprocess#5", Wrong(), "event", True, ("user",), OutputLayout(("user", "what")), COLUMNS
    )
    store = FakeStore()
    processor = CoKeyedProcessor(spec)
    processor.init(FakeHandle(store))
    with pytest.raises(Exception, match=r"coprocess#5") as failure:
        run_epoch(processor, store, [_limit("a", 10, 0, 5)], 0, 1)
    assert "\n" not in str(failure.value)


class Tag(CoProcessFunction):
    """A non-keyed co-process function: each element named by its input and time; timers refused."""

    def process_element1(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
        if value["amount"] < 0:
            ctx.timer_service()
        yield {
            "user": value["user"],
            "what": f"event {value['amount']} at {ctx.timestamp()} key {ctx.get_current_key()}",
        }

    def process_element2(self, value: dict[str, Any], ctx: KeyedContext) -> Any:
        yield {"user": value["account"], "what": f"limit {value['limit']} at {ctx.timestamp()}"}


def test_a_non_keyed_co_process_function_sees_both_inputs_in_the_connected_order_without_key_or_timers() -> (
    None
):
    spec = ProcessSpec(
        "coprocess#6", Tag(), "processing", False, (), OutputLayout(("user", "what")), COLUMNS, keyed=False
    )
    rows = [_event("a", 20, 0, 7), _limit("b", 10, 0, 5), _event("c", 20, 1, 6)]
    outputs = set()
    for permutation in itertools.permutations(rows):
        store = FakeStore()
        processor = CoKeyedProcessor(spec)
        processor.init(FakeHandle(store))
        bucketed = [
            Row(**{**r.asDict(), "__key": 3}) for r in permutation
        ]  # one bucket, as the compiler may give
        outputs.add(tuple(_whats(run_epoch(processor, store, bucketed, 0, 1))))
    assert outputs == {("limit 5 at 10", "event 7 at 20 key None", "event 6 at 20 key None")}
    assert not store.values and not store.timers, "no state, no timers"
    processor = CoKeyedProcessor(spec)
    processor.init(FakeHandle(FakeStore()))
    with pytest.raises(KeyedStateError, match="coprocess#6: timers need keyed streams"):
        run_epoch(processor, FakeStore(), [_event("a", 1, 0, -1)], 0, 1)
