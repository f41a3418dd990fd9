"""DataStream pipelines of the keyed-operator tests (process functions, rolling aggregates), importable by the job
subprocess and its Python workers. Their plain-Python references live in `ref_keyed`.

Input elements: `{"id", "user", "amount", "ts"}` (JSON), event time from `ts` with a 3 s out-of-orderness bound.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import functions as F

from ethereal_kafka.api import (
    AggregateFunction,
    AggregatingStateDescriptor,
    KeyedContext,
    KeyedProcessFunction,
    KeyedStream,
    ListStateDescriptor,
    MapStateDescriptor,
    OutputTag,
    RuntimeContext,
    StateTtlConfig,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    ValueStateDescriptor,
    WatermarkStrategy,
)

BOUND_MS = 3_000
SLOT_MS = 10_000
TTL_MS = 300
EVENT_DDL = "id long, user string, amount long, ts long"
CANCELLED = OutputTag("cancelled", "user string, id long, at long")


def _keyed(env: StreamExecutionEnvironment) -> KeyedStream:
    return (
        env.from_source("events")
        .select(F.col("id"), F.col("user"), F.col("amount"), F.col("ts"))
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS).with_timestamp_assigner("ts")
        )
        .key_by("user")
    )


# -- every kind of state ------------------------------------------------------------------------------------------
class Mean(AggregateFunction[tuple[int, int]]):
    """Mean amount."""

    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: dict[str, Any], accumulator: tuple[int, int]) -> tuple[int, int]:
        return accumulator[0] + value["amount"], accumulator[1] + 1

    def get_result(self, accumulator: tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]


class StateKinds(KeyedProcessFunction):
    """Per user: a count (ValueState), the last three amounts (ListState), sums per amount % 3 (MapState, bucket 0
    emptied every 5th element), the mean amount (AggregatingState)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent"))
        self.buckets = runtime_context.get_map_state(MapStateDescriptor("buckets"))
        self.mean = runtime_context.get_aggregating_state(AggregatingStateDescriptor("mean", Mean()))

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.recent.add(value["amount"])
        recent = self.recent.get()
        if len(recent) > 3:
            recent = recent[-3:]
            self.recent.update(recent)
        bucket = value["amount"] % 3
        self.buckets.put(bucket, (self.buckets.get(bucket) or 0) + value["amount"])
        bucket_sum = self.buckets.get(bucket)
        if n % 5 == 0:
            self.buckets.remove(0)
        self.mean.add(value)
        yield {
            "user": ctx.get_current_key(),
            "id": value["id"],
            "n": n,
            "recent": ",".join(str(a) for a in recent),
            "bucket_sum": bucket_sum,
            "buckets": ",".join(f"{k}:{v}" for k, v in self.buckets.items()),
            "mean": self.mean.get(),
            "ts": ctx.timestamp(),
        }


STATE_KINDS_DDL = (
    "user string, id long, n long, recent string, bucket_sum long, buckets string, mean double, ts long"
)


def state_kinds(env: StreamExecutionEnvironment) -> None:
    """`StateKinds` in event-time mode."""
    _keyed(env).process(StateKinds(), output_type=STATE_KINDS_DDL).sink_to("out")


# -- event-time timers with a side output --------------------------------------------------------------------------
class SlotTimers(KeyedProcessFunction):
    """Per user: a running total; each element asks for a timer at the end of its 10 s slot, which reports the total
    and the watermark; an element whose amount is a multiple of 7 cancels its slot's timer instead (side output)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))
        self.slots = runtime_context.get_map_state(MapStateDescriptor("slots"))

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        total = (self.total.value() or 0) + value["amount"]
        self.total.update(total)
        timestamp = ctx.timestamp()
        assert timestamp is not None
        at = (timestamp // SLOT_MS + 1) * SLOT_MS
        timers = ctx.timer_service()
        if value["amount"] % 7 == 0:
            if self.slots.contains(at):
                timers.delete_event_time_timer(at)
                self.slots.remove(at)
                ctx.output(CANCELLED, {"user": ctx.get_current_key(), "id": value["id"], "at": at})
        else:
            timers.register_event_time_timer(at)
            self.slots.put(at, value["id"])
        yield {
            "user": ctx.get_current_key(),
            "kind": "element",
            "id": value["id"],
            "at": timestamp,
            "total": total,
            "wm": timers.current_watermark(),
        }

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        self.slots.remove(timestamp)
        yield {
            "user": ctx.get_current_key(),
            "kind": "timer",
            "id": -1,
            "at": ctx.timestamp(),
            "total": self.total.value(),
            "wm": ctx.timer_service().current_watermark(),
        }


TIMERS_DDL = "user string, kind string, id long, at long, total long, wm long"


def slot_timers(env: StreamExecutionEnvironment) -> None:
    """`SlotTimers` in event-time mode, the cancellations to a second sink."""
    out = _keyed(env).process(SlotTimers(), output_type=TIMERS_DDL, side_outputs=[CANCELLED])
    out.sink_to("out")
    out.get_side_output(CANCELLED).sink_to("cancelled")


def slot_timers_polled(env: StreamExecutionEnvironment) -> None:
    """`SlotTimers` in processing-time mode: its event-time timers are polled each epoch."""
    out = _keyed(env).process(
        SlotTimers(), output_type=TIMERS_DDL, side_outputs=[CANCELLED], time_mode="processing"
    )
    out.sink_to("out")
    out.get_side_output(CANCELLED).sink_to("cancelled")


# -- processing-time timers and TTL ------------------------------------------------------------------------------
class Expiring(KeyedProcessFunction):
    """Per user: the last id (ValueState) and the ids seen (ListState), both living `TTL_MS` of processing time, and
    a processing-time timer 1 ms after each epoch's processing time, which reports what is still alive then."""

    def open(self, runtime_context: RuntimeContext) -> None:
        ttl = StateTtlConfig.new_builder(Time.milliseconds(TTL_MS))
        self.last = runtime_context.get_state(ValueStateDescriptor("last", ttl))
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen", ttl))

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        now = ctx.timer_service().current_processing_time()
        previous = self.last.value()
        self.last.update(value["id"])
        self.seen.add(value["id"])
        ctx.timer_service().register_processing_time_timer(now + 1)
        yield {
            "user": ctx.get_current_key(),
            "kind": "element",
            "id": value["id"],
            "prev": previous,
            "seen": len(self.seen.get()),
            "at": now,
        }

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        yield {
            "user": ctx.get_current_key(),
            "kind": "timer",
            "id": -1,
            "prev": self.last.value(),
            "seen": len(self.seen.get()),
            "at": timestamp,
        }


EXPIRING_DDL = "user string, kind string, id long, prev long, seen long, at long"


def expiring(env: StreamExecutionEnvironment) -> None:
    """`Expiring` on a stream without event time (`auto` → processing-time mode)."""
    (
        env.from_source("events")
        .select(F.col("id"), F.col("user"), F.col("amount"), F.col("ts"))
        .key_by("user")
        .process(Expiring(), output_type=EXPIRING_DDL)
        .sink_to("out")
    )


class ExpiringNoTimers(Expiring):
    """The TTL part of `Expiring`, for event-time mode (which has no processing-time timers)."""

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        now = ctx.timer_service().current_processing_time()
        previous = self.last.value()
        self.last.update(value["id"])
        self.seen.add(value["id"])
        yield {
            "user": ctx.get_current_key(),
            "kind": "element",
            "id": value["id"],
            "prev": previous,
            "seen": len(self.seen.get()),
            "at": now,
        }


def expiring_event_mode(env: StreamExecutionEnvironment) -> None:
    """`ExpiringNoTimers` in event-time mode."""
    _keyed(env).process(ExpiringNoTimers(), output_type=EXPIRING_DDL).sink_to("out")


# -- rolling aggregates --------------------------------------------------------------------------------------------
class CountMean(AggregateFunction[list[int]]):
    """Count and mean amount."""

    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: dict[str, Any], accumulator: list[int]) -> list[int]:
        accumulator[0] += 1
        accumulator[1] += value["amount"]
        return accumulator

    def get_result(self, accumulator: list[int]) -> dict[str, Any]:
        return {"count": accumulator[0], "mean": accumulator[1] / accumulator[0]}


def _largest(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return b if b["amount"] > a["amount"] else a


ROLLING_DDL = "kind string, user string, id long, amount long, count long, mean double"


def rolling(env: StreamExecutionEnvironment) -> None:
    """Rolling sum, reduce (the largest element so far) and aggregate (count, mean) per user, tagged by kind and
    unioned into one sink."""
    keyed = _keyed(env)

    def tag(kind: str) -> Any:
        return lambda e: {
            "kind": kind,
            "user": e["user"],
            "id": e.get("id", -1),
            "amount": e.get("amount", -1),
            "count": e.get("count", -1),
            "mean": e.get("mean", -1.0),
        }

    sums = keyed.sum("amount").map(tag("sum"), ROLLING_DDL)
    largest = keyed.reduce(_largest).map(tag("max"), ROLLING_DDL)
    means = keyed.aggregate(CountMean(), output_type="count long, mean double").map(tag("agg"), ROLLING_DDL)
    sums.union(largest, means).sink_to("out")


# -- a Spark-native operator (state backends) ----------------------------------------------------------------------
def native_counts(env: StreamExecutionEnvironment) -> None:
    """Elements per user and 10 s tumbling window (Spark's own window aggregation)."""
    (
        _keyed(env)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(SLOT_MS)))
        .count()
        .map(
            lambda e: {
                "user": e["user"],
                "start": round(e["window_start"].timestamp() * 1000),
                "count": e["count"],
            },
            "user string, start long, count long",
        )
        .sink_to("out")
    )
