"""Event time carried across restarts: the carrier source (`format("ethereal-kafka-event-time")`) and the file its
maxima come from.

Why: Spark keeps the watermark of each input of a query (each `withWatermark`) in memory only; its checkpoint holds
the query's global watermark and nothing per input (apache/spark#48570 discusses it). Under the min policy (the
default) an input that read ahead in event time and then has nothing new after a restart counts as "no watermark
yet", which holds the global watermark where the restart found it: windows and joins stop closing until that input
sees data again. The same input offsets then give other output depending on when the job restarted.

How (see docs/exactly-once.md, "Event time across restarts"):
- Each watermarked input of such a query (`plan.event_time`) is unioned, just before its `withWatermark`, with the
  rows of this source for its node: one row whose event time is the largest the input read in the epochs before.
  Spark's watermark operator counts the row like any other, so its per-input watermark is where it was before the
  restart; a filter after the watermark drops the row. The same union is observed (`observe`, the largest event
  time per input, the carrier row included).
- After each epoch's write, inside `foreachBatch`, the runner reads the observed maxima of the epoch from the
  query's last execution and posts them here (`post_maxima`), in the query's Spark checkpoint folder, before Spark
  commits the epoch.
- `latestOffset` reads the maxima posted for the last epoch Spark committed; they become the source's end offset
  (`{"@event-time": {node: max}, "@event-time-run": first epoch of this start}`), which Spark logs before the
  epoch runs; `partitions(start, end)` carries the maxima of `end`. Offset keys starting with `@` are not topics
  (`checkpoint.spark_log`).
- Spark plans a source's partitions only in an epoch where its offset moved. Within a run that is enough (Spark
  keeps the per-input watermarks in memory). After a restart the first epoch must carry the maxima: the offset
  names the start (its first epoch), so the first epoch planned after a restart always has the carrier's rows; and
  an epoch logged before the crash and replayed now (`uncommitted_epoch`) gets its carrier lines renamed to this
  start before the query starts (`mark_replay`), so its replay has them too, with the maxima it logged.

So a replayed epoch gets the maxima it got the first time, and the first epoch after a restart those of every
epoch before it. The offset changes only when the maxima or the start do: the source makes Spark run an epoch of
its own only after an epoch that moved an input's event time, and once after a restart (an epoch of carrier rows
only: nothing is read from Kafka, nothing moves the watermark, output is what the next epoch would have written
first).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ethereal_kafka.paths import write_durably

#: Spark format name of the carrier source.
FORMAT = "ethereal-kafka-event-time"
#: The carrier's offset keys (keys starting with `@` are not topics): the maxima, and the start that planned it.
OFFSET_KEY = "@event-time"
RUN_KEY = "@event-time-run"
#: Hidden column set on carrier rows between the union and the filter after the watermark.
CARRIER_COLUMN = "__carrier"
#: Name of the file holding the posted maxima, in the query's Spark checkpoint folder.
FILE_NAME = "ethereal-kafka-event-time.json"
#: Epochs whose maxima the file keeps (a restart needs only the last committed one's).
KEPT = 8
#: The carrier's schema: the watermark node it is for and the largest event time read before (UTC).
SCHEMA = "node string, ts timestamp"


def observed_name(node_id: int) -> str:
    """The name of the observed metric (Spark's `observe`) holding node `node_id`'s largest event time (µs)."""
    return f"ek_event_time_{node_id}"


def maxima_path(query_checkpoint: str | Path) -> Path:
    """Where the maxima of the query whose Spark checkpoint folder is `query_checkpoint` are posted."""
    return Path(query_checkpoint) / FILE_NAME


def post_maxima(path: Path, epoch: int, maxima: Mapping[str, int]) -> None:
    """Record `maxima` (watermark node id → largest event time read up to and including `epoch`, µs since the
    epoch) as epoch `epoch`'s, durably and atomically, keeping the last `KEPT` epochs. An entry for `epoch` or any
    later one (a replay) is replaced.

    Raises:
        OSError: the checkpoint folder cannot be written.
    """
    entries = [e for e in _entries(path) if e[0] < epoch][-(KEPT - 1) :]
    entries.append((epoch, dict(maxima)))
    body = {"entries": [{"epoch": e, "maxima": m} for e, m in entries]}
    write_durably(path, json.dumps(body, sort_keys=True))


def read_maxima(path: Path, through_epoch: int | None) -> dict[str, int]:
    """The maxima posted for the last epoch up to `through_epoch` (None: none committed yet → empty)."""
    if through_epoch is None:
        return {}
    found: dict[str, int] = {}
    for epoch, maxima in _entries(path):
        if epoch <= through_epoch:
            found = maxima
    return found


def _entries(path: Path) -> list[tuple[int, dict[str, int]]]:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    return sorted(
        (int(e["epoch"]), {str(k): int(v) for k, v in e["maxima"].items()}) for e in body.get("entries", [])
    )


def last_committed(query_checkpoint: str | Path) -> int | None:
    """The last epoch Spark committed in the query's checkpoint (`commits/N`), None before the first."""
    return _last(Path(query_checkpoint) / "commits")


def _last(folder: Path) -> int | None:
    try:
        epochs = [int(p.name) for p in folder.iterdir() if p.name.isdigit()]
    except FileNotFoundError:
        return None
    return max(epochs) if epochs else None


def first_epoch(query_checkpoint: str | Path) -> int:
    """The first epoch a start of the query plans or replays: the one after the last committed."""
    last = last_committed(query_checkpoint)
    return 0 if last is None else last + 1


def mark_replay(query_checkpoint: str | Path) -> int | None:
    """Before a start: name this start in the carrier lines of the epoch Spark logged and did not commit (the one
    it replays), so the replay plans the carrier's rows (see the module docstring); returns that epoch, or None when
    there is none. The maxima logged stay as they are.

    Raises:
        OSError: the offset log cannot be rewritten.
    """
    epoch = _last(Path(query_checkpoint) / "offsets")
    if epoch is None or epoch != first_epoch(query_checkpoint):
        return None
    path = Path(query_checkpoint) / "offsets" / str(epoch)
    lines = path.read_text(encoding="utf-8").split("\n")
    changed = False
    for i, line in enumerate(lines[2:], start=2):
        if not line.startswith("{"):
            continue
        value = json.loads(line)
        if isinstance(value, dict) and OFFSET_KEY in value and value.get(RUN_KEY) != epoch:
            lines[i] = json.dumps({**value, RUN_KEY: epoch}, separators=(",", ":"))
            changed = True
    if changed:
        write_durably(path, "\n".join(lines))
    return epoch


class CarrierPartition(InputPartition):
    """The one partition of an epoch: the maxima its end offset carries."""

    def __init__(self, maxima: Mapping[str, int]) -> None:
        self.maxima = dict(maxima)


class EventTimeCarrierSource(DataSource):
    """`spark.readStream.format(FORMAT).option("checkpoint", <the query's Spark checkpoint folder>).load()`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return CarrierReader(str(self.options["checkpoint"]))


class CarrierReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. `availableNow` needs nothing fixed: the maxima are read at every planning."""

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        self.run = first_epoch(checkpoint)  # Spark builds the reader as the query starts, before any epoch

    def initialOffset(self) -> dict[str, Any]:
        return {OFFSET_KEY: {}, RUN_KEY: -1}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to fix: an `availableNow` run reads the maxima as its epochs commit."""

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The maxima posted for the last epoch Spark committed (Spark calls this after that epoch's
        `foreachBatch`, which posted them)."""
        through = last_committed(self.checkpoint)
        return {OFFSET_KEY: read_maxima(maxima_path(self.checkpoint), through), RUN_KEY: self.run}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One partition carrying `end`'s maxima; pure (Spark asks only when `end` differs from `start`)."""
        return [CarrierPartition(end.get(OFFSET_KEY, {}))]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release."""

    def read(self, partition: InputPartition) -> Iterator[tuple[str, datetime.datetime]]:
        """One row per node: its id and its largest event time read before the epoch."""
        assert isinstance(partition, CarrierPartition)
        for node, micros in sorted(partition.maxima.items()):
            yield (
                node,
                datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(microseconds=micros),
            )
