"""Jobs for `test_savepoints.py`. Without event time: a running total per user (`totals`, a rolling sum) and every
kind of keyed state (`kinds`, `keyed_jobs.StateKinds`: value, list, map, aggregating) followed in its query by a
rolling reduce (`kinds-last`), each to a sink of its own (two queries), and a processing-time timer far in the
future in `kinds`. With event time (`timed`): event-time
timers that report the watermark (`slots`, `keyed_jobs.SlotTimers`, with a side output) and a tumbling window
reduced by a Python function (`sums`, the framework's window operator)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql import functions as F

from ethereal_kafka.api import (
    KeyedContext,
    KeyedStream,
    MapStateDescriptor,
    RuntimeContext,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from tests.integration.keyed_jobs import (
    BOUND_MS,
    CANCELLED,
    STATE_KINDS_DDL,
    TIMERS_DDL,
    SlotTimers,
    StateKinds,
    _keyed,
)

TOTALS_DDL = "user string, amount long"
#: The element `SlowKinds` takes `SLOW_S` over: the last of the first half in `test_savepoints.py` (120 events).
SLOW_ID, SLOW_S = 59, 10.0
#: Processing-time timers at this time (2100-01-01) and after never fire in a test; the savepoint carries them.
FAR_MS = 4_102_444_800_000


class TimedKinds(StateKinds):
    """`StateKinds`, each element also registering a processing-time timer at `FAR_MS` plus its id (never fires)."""

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        ctx.timer_service().register_processing_time_timer(FAR_MS + value["id"])
        yield from super().process_element(value, ctx)


def _events(env: StreamExecutionEnvironment) -> KeyedStream:
    return env.from_source("events").key_by("user")


def _totals(keyed: KeyedStream) -> None:
    keyed.sum("amount").uid("totals").map(
        lambda e: {"user": e["user"], "amount": e["amount"]}, TOTALS_DDL
    ).sink_to("totals")


def _latest(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Reduce: the later element, its `n` the sum of every `n` so far (what it writes depends on its state)."""
    return {**b, "n": a["n"] + b["n"]}


def _kinds(keyed: KeyedStream, function: TimedKinds) -> None:
    """`kinds` and, in the same query after it, a rolling reduce (`kinds-last`): two stateful operators in one
    query, which Spark numbers from the sink up."""
    kinds = keyed.process(function, output_type=STATE_KINDS_DDL, time_mode="processing").uid("kinds")
    kinds.key_by("user").reduce(_latest).uid("kinds-last").sink_to("kinds")


def v1(env: StreamExecutionEnvironment) -> None:
    """Both operators."""
    keyed = _events(env)
    _totals(keyed)
    _kinds(keyed, TimedKinds())


class SlowKinds(TimedKinds):
    """`TimedKinds` taking `SLOW_S` over the element `SLOW_ID`: the epoch of `kinds` that holds it lags behind the
    same epoch of `totals`, which reads the same input (a savepoint of queries that stood at different offsets of a
    partition). One task waits, so the other task slot runs `totals` meanwhile."""

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        if value["id"] == SLOW_ID:
            time.sleep(SLOW_S)
        yield from super().process_element(value, ctx)


def slow_v1(env: StreamExecutionEnvironment) -> None:
    """`v1` whose `kinds` is slow (`SlowKinds`): the same operators, uids and state."""
    keyed = _events(env)
    _totals(keyed)
    _kinds(keyed, SlowKinds())


class RecentAsMap(TimedKinds):
    """`TimedKinds` whose `recent` became a map: the savepoint's list of it cannot be read."""

    def open(self, runtime_context: RuntimeContext) -> None:
        super().open(runtime_context)
        self.recent = runtime_context.get_map_state(MapStateDescriptor("recent"))


def v3_recent_as_map(env: StreamExecutionEnvironment) -> None:
    """`v1` with an incompatible state schema in `kinds`."""
    keyed = _events(env)
    _totals(keyed)
    _kinds(keyed, RecentAsMap())


def v2_without_kinds(env: StreamExecutionEnvironment) -> None:
    """A next version without `kinds`: its state would be lost."""
    _totals(_events(env))


def v4_evolved(env: StreamExecutionEnvironment) -> None:
    """A next version with one operator changed (`totals` reports ten times its running sum: the same state, read on),
    one added (`counts`, a running count per user: starts empty) and one removed (`kinds`: restored only with
    --allow-non-restored-state)."""
    keyed = _events(env)
    keyed.sum("amount").uid("totals").map(
        lambda e: {"user": e["user"], "amount": 10 * e["amount"]}, TOTALS_DDL
    ).sink_to("totals")
    keyed.map(lambda e: {"user": e["user"], "amount": 1}, TOTALS_DDL).key_by("user").sum("amount").uid(
        "counts"
    ).map(lambda e: {"user": e["user"], "amount": e["amount"]}, TOTALS_DDL).sink_to("counts")


def _add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Reduce: the later element, with the amounts summed."""
    return {**b, "amount": a["amount"] + b["amount"]}


def _lonely(env: StreamExecutionEnvironment) -> None:
    """The framework's join: per user and 10 s window, the even amounts with no amount divisible by 11 beside them."""
    events = (
        env.from_source("events")
        .select(F.col("id"), F.col("user"), F.col("amount"), F.col("ts"))
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS).with_timestamp_assigner("ts")
        )
    )
    even = events.filter(lambda e: e["amount"] % 2 == 0)
    elevenths = events.filter(lambda e: e["amount"] % 11 == 0)
    joined = even.join(elevenths, "anti").where("user").equal_to("user")
    joined.window(TumblingEventTimeWindows.of(Time.seconds(10))).apply().uid("lonely").sink_to("lonely")


def timed(env: StreamExecutionEnvironment) -> None:
    """Event-time timers reporting the watermark each element saw, a Python-reduced tumbling window and an anti
    join."""
    slots = _keyed(env).process(SlotTimers(), output_type=TIMERS_DDL, side_outputs=[CANCELLED]).uid("slots")
    slots.sink_to("slots")
    slots.get_side_output(CANCELLED).sink_to("cancelled")
    _keyed(env).window(TumblingEventTimeWindows.of(Time.seconds(10))).reduce(_add).uid("sums").sink_to("sums")
    _lonely(env)


def _more_for_u1(window: dict[str, Any]) -> dict[str, Any]:
    """A change that reaches exactly one key: user u1's window sums gain 1000."""
    return {**window, "amount": window["amount"] + 1000} if window["user"] == "u1" else window


def timed_changed(env: StreamExecutionEnvironment) -> None:
    """`timed` with one change in the window's output: only u1's sums differ (for `shadow` and `diff`)."""
    slots = _keyed(env).process(SlotTimers(), output_type=TIMERS_DDL, side_outputs=[CANCELLED]).uid("slots")
    slots.sink_to("slots")
    slots.get_side_output(CANCELLED).sink_to("cancelled")
    sums = _keyed(env).window(TumblingEventTimeWindows.of(Time.seconds(10))).reduce(_add).uid("sums")
    sums.map(_more_for_u1).sink_to("sums")
    _lonely(env)
