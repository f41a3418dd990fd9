"""User-activity sessionization: per user, sessions of clicks closed by 30 s of inactivity, at most 10 minutes long.

    ethereal-kafka run connectors/examples/sessions-job.properties

Input (`clicks`, JSON): `{"user": string, "page": string, "ts": epoch ms}`, event time `ts` with 5 s of
out-of-orderness. Per user (`key_by("user")`), `EventTimeSessionWindows` with a 30 s gap and a 10 minute max length
group clicks into sessions; `SessionStats`, a Python `AggregateFunction`, counts clicks and distinct pages and keeps
the first and last page (its `merge` combines two sessions that a late click bridges). A session is written when
the watermark passes its end; with 1 minute of allowed lateness a late click re-emits its session with the updated
figures, and clicks later than that go to the `late-clicks` topic instead of being dropped. Sessions with a Python
function, a max length and lateness run on the **framework's window operator** (see docs/operators-windows.md).

Output (`sessions`, JSON, keyed by user):
`{"user": "u7", "window_start": "...", "window_end": "...", "clicks": 4, "pages": 3, "first_page": "/home",
"last_page": "/cart", "duration_ms": 41000}`.
"""

from __future__ import annotations

import random
import time
from typing import Any

from ethereal_kafka.api import (
    AggregateFunction,
    EventTimeSessionWindows,
    OutputTag,
    StreamExecutionEnvironment,
    Time,
    WatermarkStrategy,
)

GAP = Time.seconds(30)
MAX_LENGTH = Time.minutes(10)
LATENESS = Time.minutes(1)
OUT_OF_ORDER = Time.seconds(5)
LATE_CLICKS = OutputTag("late_clicks")
SESSION_DDL = "clicks long, pages long, first_page string, last_page string, duration_ms long"
PAGES = ("/home", "/search", "/product", "/cart", "/checkout", "/help")

Acc = dict[str, Any]


class SessionStats(AggregateFunction[Acc]):
    """Clicks, distinct pages, first and last page (by event time) and duration of a session."""

    def create_accumulator(self) -> Acc:
        return {"clicks": 0, "pages": set(), "first": None, "last": None}

    def add(self, value: dict[str, Any], accumulator: Acc) -> Acc:
        click = (value["ts"], value["page"])
        accumulator["clicks"] += 1
        accumulator["pages"].add(value["page"])
        if accumulator["first"] is None or click < accumulator["first"]:
            accumulator["first"] = click
        if accumulator["last"] is None or click > accumulator["last"]:
            accumulator["last"] = click
        return accumulator

    def merge(self, a: Acc, b: Acc) -> Acc:
        firsts = [c for c in (a["first"], b["first"]) if c is not None]
        lasts = [c for c in (a["last"], b["last"]) if c is not None]
        return {
            "clicks": a["clicks"] + b["clicks"],
            "pages": a["pages"] | b["pages"],
            "first": min(firsts) if firsts else None,
            "last": max(lasts) if lasts else None,
        }

    def get_result(self, accumulator: Acc) -> dict[str, Any]:
        first, last = accumulator["first"], accumulator["last"]
        return {
            "clicks": accumulator["clicks"],
            "pages": len(accumulator["pages"]),
            "first_page": first[1],
            "last_page": last[1],
            "duration_ms": last[0] - first[0],
        }


def build(env: StreamExecutionEnvironment) -> None:
    """The job's pipeline: `clicks` → sessions per user → `sessions` (late clicks → `late_clicks`)."""
    sessions = (
        env.from_source("clicks")
        .select("user", "page", "ts")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(OUT_OF_ORDER).with_timestamp_assigner("ts")
        )
        .key_by("user")
        .window(EventTimeSessionWindows.with_gap(GAP).with_max_length(MAX_LENGTH))
        .allowed_lateness(LATENESS)
        .side_output_late_data(LATE_CLICKS)
        .aggregate(SessionStats(), output_type=SESSION_DDL)
    )
    sessions.sink_to("sessions")
    sessions.get_side_output(LATE_CLICKS).sink_to("late_clicks")


def clicks(count: int, users: int = 12, seed: int = 5, start_ms: int | None = None) -> list[dict[str, Any]]:
    """Demo input: `count` clicks of `users` users from `start_ms` (default: an hour ago, so a broker's retention
    keeps them). An active user clicks every ~3 s; after a click it goes away for 45 s to 3 minutes with
    probability 0.1 (ending its session). Event times are up to 4 s out of order, 2% of them 1-4 minutes late."""
    rng = random.Random(seed)
    clock = (int(time.time()) // 60) * 60_000 - 3_600_000 if start_ms is None else start_ms
    names = [f"u{i}" for i in range(users)]
    away = dict.fromkeys(names, clock)
    out: list[dict[str, Any]] = []
    while len(out) < count:
        clock += rng.randint(0, 6_000 // users)
        user = rng.choice(names)
        if clock < away[user]:
            continue
        if rng.random() < 0.1:
            away[user] = clock + rng.randint(45_000, 180_000)
        ts = clock - (rng.randint(60_000, 240_000) if rng.random() < 0.02 else rng.randint(0, 4_000))
        out.append({"user": user, "page": rng.choice(PAGES), "ts": ts})
    return out
