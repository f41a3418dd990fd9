"""Windowed word count: lines of text → words → counts per word per 10 s of event time.

    ethereal-kafka run connectors/examples/wordcount-job.properties

Input (`lines`, string values): one line of text per record; event time is the Kafka record timestamp, with 5 s of
out-of-orderness. The lines are split into lower-case words in the JVM (`select` with Spark SQL, no per-record
Python), keyed by word and counted in tumbling 10 s windows. A window with an aggregate expression and no lateness,
side output or trigger runs on **Spark's native window aggregation**: a window is written once, in the first epoch
whose watermark reaches its end; records that arrive after that are dropped by Spark (see
docs/operators-windows.md). Output (`counts`, JSON, keyed by word):
`{"word": "kafka", "window_start": "...", "window_end": "...", "count": 3}`.
"""

from __future__ import annotations

import random

from ethereal_kafka.api import StreamExecutionEnvironment, Time, TumblingEventTimeWindows, WatermarkStrategy

WINDOW = Time.seconds(10)
OUT_OF_ORDER = Time.seconds(5)
WORDS = [
    "exactly",
    "once",
    "kafka",
    "spark",
    "stream",
    "window",
    "watermark",
    "epoch",
    "state",
    "topic",
    "record",
    "offset",
]


def build(env: StreamExecutionEnvironment) -> None:
    """The job's pipeline: `lines` → words → tumbling counts → `counts`."""
    (
        env.from_source("lines")
        .select("explode(split(lower(value), '[^a-z0-9]+')) AS word")
        .filter("word <> ''")
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_bounded_out_of_orderness(OUT_OF_ORDER))
        .key_by("word")
        .window(TumblingEventTimeWindows.of(WINDOW))
        .count()
        .sink_to("counts")
    )


def lines(count: int, seed: int = 3) -> list[str]:
    """Demo input: `count` lines of 3-8 words drawn from a small vocabulary."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) for _ in range(count)]
