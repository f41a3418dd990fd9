"""Jobs for `test_savepoints.py`. Without event time: a running total per user (`totals`, a rolling sum) and every
kind of keyed state (`kinds`, `keyed_jobs.StateKinds`: value, list, map, aggregating), each to a sink of its own
(two queries), and a processing-time timer far in the future in `kinds`. With event time (`timed`): event-time
timers that report the watermark (`slots`, `keyed_jobs.SlotTimers`, with a side output) and a tumbling window
reduced by a Python function (`sums`, the framework's window operator)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ethereal_kafka.api import (
    KeyedContext,
    KeyedStream,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
)
from tests.integration.keyed_jobs import (
    CANCELLED,
    STATE_KINDS_DDL,
    TIMERS_DDL,
    SlotTimers,
    StateKinds,
    _keyed,
)

TOTALS_DDL = "user string, amount long"
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


def v1(env: StreamExecutionEnvironment) -> None:
    """Both operators."""
    keyed = _events(env)
    _totals(keyed)
    keyed.process(TimedKinds(), output_type=STATE_KINDS_DDL, time_mode="processing").uid("kinds").sink_to(
        "kinds"
    )


def v2_without_kinds(env: StreamExecutionEnvironment) -> None:
    """A next version without `kinds`: its state would be lost."""
    _totals(_events(env))


def _add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Reduce: the later element, with the amounts summed."""
    return {**b, "amount": a["amount"] + b["amount"]}


def timed(env: StreamExecutionEnvironment) -> None:
    """Event-time timers reporting the watermark each element saw, and a Python-reduced tumbling window."""
    slots = _keyed(env).process(SlotTimers(), output_type=TIMERS_DDL, side_outputs=[CANCELLED]).uid("slots")
    slots.sink_to("slots")
    slots.get_side_output(CANCELLED).sink_to("cancelled")
    _keyed(env).window(TumblingEventTimeWindows.of(Time.seconds(10))).reduce(_add).uid("sums").sink_to("sums")


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
