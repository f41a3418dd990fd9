"""DataStream pipelines the window tests run (`pipeline=tests.integration.window_jobs:<name>`), and their functions.

Every pipeline reads `events` (JSON `user string, amount long, ts long`) and takes event time from `ts` with a
`BOUND` ms out-of-orderness bound. The tests end their input with a record of key `flush` far ahead in event time:
it closes every other window, and its own never closes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ethereal_kafka.api import (
    AggregateFunction,
    ContinuousEventTimeTrigger,
    CountTrigger,
    DataStream,
    EventTimeSessionWindows,
    GlobalWindows,
    OutputTag,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    WatermarkStrategy,
    WindowContext,
)

BOUND = 1_000
TUMBLE = 5_000
LATENESS = 3_000
SLIDE_SIZE, SLIDE = 6_000, 3_000
GAP, SESSION_LATENESS = 2_500, 2_000
MAX_LENGTH = 6_000
CONTINUOUS_SIZE, CONTINUOUS_EVERY = 15_000, 4_000
COUNT_SIZE, SLIDING_COUNT, SLIDING_STEP, GLOBAL_EVERY = 3, 4, 2, 5
LATE = OutputTag("late")


def events(
    env: StreamExecutionEnvironment, source: str = "events", idleness: int | None = None
) -> DataStream:
    """The input stream with event time (`idleness`: declare the input may go quiet)."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(BOUND).with_timestamp_assigner("ts")
    if idleness is not None:
        strategy = strategy.with_idleness(idleness)
    return env.from_source(source).select("user", "amount", "ts").assign_timestamps_and_watermarks(strategy)


def valid(element: dict[str, Any]) -> bool:
    """A Python filter (keeps every test record): a Python step between the watermark and a native window."""
    return bool(element["amount"] >= 0)


class CountSum(AggregateFunction[dict[str, int]]):
    """Count and total amount."""

    def create_accumulator(self) -> dict[str, int]:
        return {"n": 0, "total": 0}

    def add(self, value: dict[str, Any], accumulator: dict[str, int]) -> dict[str, int]:
        accumulator["n"] += 1
        accumulator["total"] += value["amount"]
        return accumulator

    def get_result(self, accumulator: dict[str, int]) -> dict[str, int]:
        return dict(accumulator)

    def merge(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        return {"n": a["n"] + b["n"], "total": a["total"] + b["total"]}


def add_amounts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Reduce: total amount, latest event time."""
    return {"user": a["user"], "amount": a["amount"] + b["amount"], "ts": max(a["ts"], b["ts"])}


class Summary(ProcessWindowFunction):
    """Count, total, and the first and last event time of the window's elements (in the order given)."""

    def process(
        self, key: Any, context: WindowContext, elements: list[dict[str, Any]]
    ) -> Iterable[dict[str, Any]]:
        yield {
            "n": len(elements),
            "total": sum(e["amount"] for e in elements),
            "first_ts": elements[0]["ts"],
            "last_ts": elements[-1]["ts"],
        }


class WithSpan(ProcessWindowFunction):
    """Adds the window's span to the aggregate's single result."""

    def process(
        self, key: Any, context: WindowContext, elements: list[dict[str, Any]]
    ) -> Iterable[dict[str, Any]]:
        (result,) = elements
        yield {**result, "span": context.window.end - context.window.start}


SUMMARY = "n long, total long, first_ts long, last_ts long"


def time_windows(env: StreamExecutionEnvironment) -> None:
    """Framework time windows, one query each: tumbling (AggregateFunction, lateness, late records to a topic),
    sliding (reduce), tumbling with a continuous trigger (Spark aggregate expressions evaluated by the framework)."""
    keyed = events(env).key_by("user")
    tumbling = (
        keyed.window(TumblingEventTimeWindows.of(TUMBLE))
        .allowed_lateness(LATENESS)
        .side_output_late_data(LATE)
        .aggregate(CountSum(), output_type="n long, total long")
    )
    tumbling.sink_to("tumbling")
    tumbling.get_side_output(LATE).sink_to("tumbling_late")
    keyed.window(SlidingEventTimeWindows.of(SLIDE_SIZE, SLIDE)).reduce(add_amounts).sink_to("sliding")
    (
        keyed.window(TumblingEventTimeWindows.of(CONTINUOUS_SIZE))
        .trigger(ContinuousEventTimeTrigger.of(CONTINUOUS_EVERY))
        .agg("count(1) AS n", "sum(amount) AS total")
        .sink_to("continuous")
    )


def session_windows(env: StreamExecutionEnvironment) -> None:
    """Framework session windows: with lateness (process function), and with a max length (aggregate + window
    function)."""
    keyed = events(env).key_by("user")
    (
        keyed.window(EventTimeSessionWindows.with_gap(GAP))
        .allowed_lateness(SESSION_LATENESS)
        .process(Summary(), output_type=SUMMARY)
        .sink_to("session")
    )
    (
        keyed.window(EventTimeSessionWindows.with_gap(GAP).with_max_length(MAX_LENGTH))
        .aggregate(CountSum(), window_function=WithSpan(), output_type="n long, total long, span long")
        .sink_to("session_max")
    )


def count_windows(env: StreamExecutionEnvironment) -> None:
    """Count windows (tumbling: reduce; sliding: process) and a global window with a count trigger (aggregate)."""
    keyed = events(env).key_by("user")
    keyed.count_window(COUNT_SIZE).reduce(add_amounts).sink_to("count_tumbling")
    keyed.count_window(SLIDING_COUNT, SLIDING_STEP).process(Summary(), output_type=SUMMARY).sink_to(
        "count_sliding"
    )
    (
        keyed.window(GlobalWindows.create())
        .trigger(CountTrigger.of(GLOBAL_EVERY))
        .aggregate(CountSum(), output_type="n long, total long")
        .sink_to("global_count")
    )


def native_windows(env: StreamExecutionEnvironment) -> None:
    """Spark-native windows: tumbling, sliding and session with count and sum."""
    keyed = events(env).filter(valid).key_by("user")
    aggregates = ("count(1) AS n", "sum(amount) AS total")
    keyed.window(TumblingEventTimeWindows.of(TUMBLE)).agg(*aggregates).sink_to("native_tumbling")
    keyed.window(SlidingEventTimeWindows.of(SLIDE_SIZE, SLIDE)).agg(*aggregates).sink_to("native_sliding")
    keyed.window(EventTimeSessionWindows.with_gap(GAP)).agg(*aggregates).sink_to("native_session")


def idle_inputs(env: StreamExecutionEnvironment) -> None:
    """Spark-native tumbling counts over: `events` alone (one of its partitions goes quiet); `events` and `other`
    (which goes quiet) declared idle-prone; the same two without `with_idleness` (the control, which stalls)."""
    aggregates = ("count(1) AS n", "sum(amount) AS total")
    events(env).key_by("user").window(TumblingEventTimeWindows.of(TUMBLE)).agg(*aggregates).sink_to(
        "idle_partition"
    )
    both = events(env, idleness=10_000).union(events(env, "other", idleness=10_000))
    both.key_by("user").window(TumblingEventTimeWindows.of(TUMBLE)).agg(*aggregates).sink_to("idle_input")
    stalled = events(env).union(events(env, "other"))
    stalled.key_by("user").window(TumblingEventTimeWindows.of(TUMBLE)).agg(*aggregates).sink_to("stalled")
