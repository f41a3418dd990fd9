"""What one source read task tells the driver: its counts and a sketch of its records' timestamps.

Executor side: `KafkaStreamReader.read` runs a `ReadTally` over the raw Arrow batches of its offset range
(`observe()`), then `publish()`es a `ReadReport` with the decoder's counts (dead-lettered, skipped).
Driver side: a `ReportChannel` receives every report of a successful read task, as the task finishes, in the
driver's Python process (`runtime.metrics` attributes them to the epoch whose offset ranges they cover).

Transport: a PySpark accumulator with a fixed id (`REPORTS_ACCUMULATOR_ID`). The reader object is built by Spark
in a separate Python process (the streaming source runner), so no accumulator object can be handed to it; instead
the task registers a worker-side accumulator under the fixed id and PySpark's worker sends its value with the task
result, as for any accumulator. Spark merges the updates of *successful* task attempts only, on the driver, before
the job that ran the task returns: by the time an epoch's write has finished, the reports of its reads have
arrived. The driver's accumulator server ignores ids nobody registered, so with no channel open the reports are
dropped there. (`tests/integration/test_metrics.py` checks the counts end to end.)

Timestamps: for every raw record the tally keeps its age at read time, `read_ms - timestamp`, in logarithmic
buckets of ratio `AGE_GAMMA` (~1% relative error, a few hundred buckets at most), plus the exact count and sum of
the timestamps. With the commit time C of the epoch, the driver gets each record's end-to-end latency
`C - timestamp = (C - read_ms) + age`: exactly in count and sum, within ~1% of the age in the bucket it lands in.
The smallest and largest timestamp are kept exactly too (one `min`/`max` per Arrow batch), so the driver knows the
exact extremes of the latencies (`C - max`, `C - min`), which bound the percentiles it shows.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Bucket ratio of the age sketch: bucket k > 0 holds ages in [AGE_GAMMA**(k-1), AGE_GAMMA**k) ms.
AGE_GAMMA = 1.02
_LOG_GAMMA = math.log(AGE_GAMMA)
#: Ages of 1e12 ms (30 years) fit in this many buckets; larger ones are clamped to the last bucket.
_MAX_BUCKET = int(math.log(1e12) / _LOG_GAMMA) + 2

#: Id of the accumulator carrying read reports. Negative so it is never one SparkContext hands out (0, 1, ...);
#: PySpark's own special ids are -1 and -2.
REPORTS_ACCUMULATOR_ID = -0x65_74_6B_61


def age_bucket(age_ms: float) -> int:
    """The sketch bucket of one age: 0 for |age| < 1 ms, k > 0 for ages in [AGE_GAMMA**(k-1), AGE_GAMMA**k),
    -k for the negative age of the same size (a timestamp after the read: producer clock ahead)."""
    magnitude = abs(age_ms)
    if magnitude < 1:
        return 0
    k = min(_MAX_BUCKET, 1 + math.floor(math.log(magnitude) / _LOG_GAMMA))
    return k if age_ms > 0 else -k


def bucket_age(bucket: int) -> float:
    """The representative age (ms) of a bucket: the point with the least relative error to any age in it."""
    if bucket == 0:
        return 0.0
    low = AGE_GAMMA ** (abs(bucket) - 1)
    value = 2 * low * AGE_GAMMA / (1 + AGE_GAMMA)
    return value if bucket > 0 else -value


def age_buckets(ages_ms: np.ndarray) -> dict[int, int]:
    """`{bucket: count}` of an array of ages (vectorized `age_bucket`, in place on one float copy)."""
    if ages_ms.size == 0:
        return {}
    negative = bool(ages_ms.min() < 0)
    x = (np.abs(ages_ms) if negative else ages_ms).astype(np.float64)
    np.maximum(x, 0.5, out=x)  # ages under 1 ms land in bucket 0 through the clip below
    np.log(x, out=x)
    x *= 1 / _LOG_GAMMA
    np.floor(x, out=x)
    x += 1
    np.clip(x, 0, _MAX_BUCKET, out=x)
    keys = x.astype(np.int64)
    if negative:
        keys *= np.sign(ages_ms)
    low = int(keys.min())
    counts = np.bincount(keys - low)
    present = np.flatnonzero(counts)
    return dict(zip((present + low).tolist(), counts[present].tolist(), strict=True))


@dataclass(frozen=True)
class ReadReport:
    """What one successful read task of one offset range did (pickled from an executor to the driver).

    Attributes:
        source: The source connector's name.
        topic, partition, start, until: The range `[start, until)` the task read (as planned by Spark).
        records: Raw records read from Kafka, poison records included.
        dead_lettered: Poison records sent to the dead-letter topic (`on.error=dlq`).
        skipped: Poison records dropped (`on.error=skip`).
        timestamped: Records with a timestamp (all, unless a broker returned none).
        timestamp_sum_ms: Sum of those timestamps (epoch ms), exact.
        read_ms: Executor wall clock (epoch ms) when the read started; `ages` are relative to it.
        ages: The age sketch: `{bucket: count}` of `read_ms - timestamp` (see `age_bucket`).
        timestamp_min_ms, timestamp_max_ms: The smallest and largest of those timestamps (None without any, and
            in reports of an older writer).
    """

    source: str
    topic: str
    partition: int
    start: int
    until: int
    records: int
    dead_lettered: int
    skipped: int
    timestamped: int
    timestamp_sum_ms: int
    read_ms: int
    ages: dict[int, int] = field(default_factory=dict)
    timestamp_min_ms: int | None = None
    timestamp_max_ms: int | None = None


class ReadTally:
    """Counts the raw records of one read task and sketches their timestamps (executor side).

    Lifecycle: `observe()` each raw batch (of `KAFKA_ARROW_SCHEMA`) in order, then `publish()` once, after the
    decoder finished (a task that fails publishes nothing).
    """

    def __init__(self, source: str, topic: str, partition: int, start: int, until: int) -> None:
        self.source = source
        self.topic = topic
        self.partition = partition
        self.start = start
        self.until = until
        self.read_ms = int(time.time() * 1000)
        self.records = 0
        self.bytes = 0
        self.timestamped = 0
        self.timestamp_sum_ms = 0
        self.ages: dict[int, int] = {}
        self.timestamp_min_ms: int | None = None
        self.timestamp_max_ms: int | None = None

    def observe(self, raw: pa.RecordBatch) -> pa.RecordBatch:
        """Count one raw batch (records, and bytes of keys and values); returns it unchanged."""
        self.records += raw.num_rows
        for column in ("key", "value"):
            if column in raw.schema.names:
                self.bytes += int(pc.sum(pc.binary_length(raw.column(column))).as_py() or 0)
        stamps = raw.column("timestamp").cast(pa.int64())
        if stamps.null_count:
            stamps = stamps.drop_null()
        if len(stamps):
            millis = stamps.to_numpy() // 1000
            self.timestamped += int(millis.size)
            self.timestamp_sum_ms += int(millis.sum(dtype=np.int64))
            low, high = int(millis.min()), int(millis.max())
            if self.timestamp_min_ms is None or low < self.timestamp_min_ms:
                self.timestamp_min_ms = low
            if self.timestamp_max_ms is None or high > self.timestamp_max_ms:
                self.timestamp_max_ms = high
            for bucket, count in age_buckets(self.read_ms - millis).items():
                self.ages[bucket] = self.ages.get(bucket, 0) + count
        return raw

    def report(self, dead_lettered: int = 0, skipped: int = 0) -> ReadReport:
        """The task's report."""
        return ReadReport(
            self.source,
            self.topic,
            self.partition,
            self.start,
            self.until,
            self.records,
            dead_lettered,
            skipped,
            self.timestamped,
            self.timestamp_sum_ms,
            self.read_ms,
            dict(self.ages),
            self.timestamp_min_ms,
            self.timestamp_max_ms,
        )

    def publish(self, dead_lettered: int = 0, skipped: int = 0) -> None:
        """Send the report towards the driver (see the module docstring); never raises: metrics must not fail a
        read."""
        with contextlib.suppress(Exception):
            publish(self.report(dead_lettered, skipped))


class _ReportsParam:
    """AccumulatorParam of a report accumulator: a list in a task, the receiving `ReportChannel` on the driver."""

    def zero(self, value: Any) -> list[Any]:
        return []

    def addInPlace(self, value1: Any, value2: Any) -> Any:
        if isinstance(value1, ReportChannel):
            value1.deliver(list(value2))
            return value1
        value1.extend(value2)
        return value1


def publish(report: Any, accumulator_id: int = REPORTS_ACCUMULATOR_ID) -> None:
    """Add `report` to this task's accumulator `accumulator_id`; outside a Spark task, hand it to an open channel
    of this process directly (or drop it)."""
    from pyspark import TaskContext
    from pyspark.accumulators import _accumulatorRegistry, _deserialize_accumulator

    if TaskContext.get() is None:
        registered = _accumulatorRegistry.get(accumulator_id)
        channel = getattr(registered, "_value", None)
        if isinstance(channel, ReportChannel):
            channel.deliver([report])
        return
    # PySpark's worker clears its accumulator registry at the start of every task, so this is the task's own.
    accumulator: Any = _deserialize_accumulator(accumulator_id, [], _ReportsParam())  # type: ignore[arg-type]
    accumulator.add([report])


class ReportChannel:
    """The driver half: registers a report accumulator and hands each arriving batch of reports to `on_reports`.

    `on_reports` runs on PySpark's accumulator server thread while Spark's scheduler waits for it: it must be quick
    and must not raise (exceptions are caught and counted in `errors`). One channel per accumulator id and driver
    process at a time. Read reports use `REPORTS_ACCUMULATOR_ID` (the metrics); dead letters have their own
    (`dead_letters.DEAD_LETTERS_ACCUMULATOR_ID`).
    """

    def __init__(
        self,
        on_reports: Callable[[list[Any]], None],
        accumulator_id: int = REPORTS_ACCUMULATOR_ID,
        kind: type | tuple[type, ...] = ReadReport,
    ) -> None:
        self._on_reports = on_reports
        self._id = accumulator_id
        self._kind = kind
        self._lock = threading.Lock()
        self._open = False
        self.errors = 0

    def open(self) -> None:
        """Start receiving (registers the accumulator id in this driver process)."""
        from pyspark.accumulators import Accumulator

        with self._lock:
            Accumulator(self._id, self, _ReportsParam())  # type: ignore[arg-type]
            self._open = True

    def close(self) -> None:
        """Stop receiving; later reports are dropped by the accumulator server."""
        from pyspark.accumulators import _accumulatorRegistry

        with self._lock:
            self._open = False
            registered = _accumulatorRegistry.get(self._id)
            if registered is not None and getattr(registered, "_value", None) is self:
                del _accumulatorRegistry[self._id]

    def deliver(self, reports: list[Any]) -> None:
        """Hand reports to the receiver (called by the accumulator machinery)."""
        if not self._open:
            return
        try:
            self._on_reports([r for r in reports if isinstance(r, self._kind)])
        except Exception:
            self.errors += 1
