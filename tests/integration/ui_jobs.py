"""The DataStream job the web UI tests run (`pipeline=tests.integration.ui_jobs:windowed_and_copy`).

Two queries: a framework tumbling window with allowed lateness whose late records go to a side-output sink (one
query writing `totals` and `late`, shuffling and stateful), and a per-record Python map copying every event
(`copy`, partition-preserving). The select computes a column with a long SQL expression, as real jobs do (its node
label is long). With `POISON_ENV` set in the Python workers' environment when the job starts, the map fails on an
event whose amount is `POISON_AMOUNT` (the window's filter drops such events): the tests make one epoch fail with
a real user-function traceback, then restart the job without it.
"""

from __future__ import annotations

import os
from typing import Any

from ethereal_kafka.api import StreamExecutionEnvironment, TumblingEventTimeWindows, WatermarkStrategy
from tests.integration.window_jobs import LATE, CountSum, valid

WINDOW_MS = 5_000
BOUND_MS = 1_000
LATENESS_MS = 1_000
POISON_ENV = "EK_UI_TEST_POISON"
POISON_AMOUNT = -7
SIZE = "CASE WHEN amount >= 25 THEN 'large' WHEN amount >= 10 THEN 'medium' ELSE 'small' END AS size"


class PoisonedRecordError(ValueError):
    """The test's poisoned record reached the map (raised only while `POISON_ENV` is set)."""


def tag(element: dict[str, Any]) -> dict[str, Any]:
    """Copy an event, marking it."""
    if element["amount"] == POISON_AMOUNT and os.environ.get(POISON_ENV):
        raise PoisonedRecordError(f"poisoned record of user {element['user']} at ts {element['ts']}")
    return {**element, "copied": True}


def windowed_and_copy(env: StreamExecutionEnvironment) -> None:
    """See the module docstring."""
    events = env.from_source("events").select("user", "amount", "ts", SIZE)
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
    events.map(tag, output_type="user string, amount long, ts long, size string, copied boolean").sink_to(
        "copy"
    )
