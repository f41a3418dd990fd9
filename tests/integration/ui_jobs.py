"""The DataStream job the web UI tests run (`pipeline=tests.integration.ui_jobs:windowed_and_copy`).

Two queries: a framework tumbling window with allowed lateness whose late records go to a side-output sink (one
query writing `totals` and `late`, shuffling and stateful), and a per-record Python map copying every event
(`copy`, partition-preserving).
"""

from __future__ import annotations

from typing import Any

from ethereal_kafka.api import StreamExecutionEnvironment, TumblingEventTimeWindows, WatermarkStrategy
from tests.integration.window_jobs import LATE, CountSum, valid

WINDOW_MS = 5_000
BOUND_MS = 1_000
LATENESS_MS = 1_000


def tag(element: dict[str, Any]) -> dict[str, Any]:
    """Copy an event, marking it."""
    return {**element, "copied": True}


def windowed_and_copy(env: StreamExecutionEnvironment) -> None:
    """See the module docstring."""
    events = env.from_source("events").select("user", "amount", "ts")
    totals = (
        events.assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS).with_timestamp_assigner("ts")
        )
        .filter(valid)
        .key_by("user")
        .window(TumblingEventTimeWindows.of(WINDOW_MS))
        .allowed_lateness(LATENESS_MS)
        .side_output_late_data(LATE)
        .aggregate(CountSum(), output_type="n long, total long")
    )
    totals.sink_to("totals")
    totals.get_side_output(LATE).sink_to("late")
    events.map(tag, output_type="user string, amount long, ts long, copied boolean").sink_to("copy")
