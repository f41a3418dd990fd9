"""Event time carried across restarts: the carrier source (`format("ethereal-kafka-event-time")`) and the file its
maxima come from.

Why: Spark keeps the watermark of each input of a query (each `withWatermark`) in memory only; its checkpoint holds
the query's global watermark and nothing per input (apache/spark#48570 discusses it). Under the min policy (the
default) an input that read ahead in event time and then has nothing new after a restart counts as "no watermark
yet", which holds the global watermark where the restart found it: windows and joins stop closing until that input
sees data again. The same input offsets then give other output depending on when the job restarted.

How (see docs/exactly-once.md, "Event time across restarts"):
- Each watermarked input of such a query (`plan.event_time`) is unioned, just before its `withWatermark`, with a
  carrier source of its own: in an epoch where the carrier plans rows, one row whose event time is the largest the
  input read in the epochs before. Spark's watermark operator counts the row like any other, so its per-input
  watermark is where it was before the restart; a filter after the watermark drops the row. The watermark's output
  is observed (`observe`, the largest event time per input, the carrier row included).
- The carrier's schema is the input's own (every column but the event time is null in its row, read from the
  source, never a literal): Spark's optimizer infers constraints from literals in a plan (`null AS order_id` gives
  `order_id IS NULL`) and, across a stream-stream join, pushes them into the other input, where they would drop
  real records in an epoch whose union holds the carrier's row only.
- After each epoch's write, inside `foreachBatch`, the runner reads the observed maxima of the epoch from the
  query's last execution and posts them here (`post_maxima`), in the query's Spark checkpoint folder, before Spark
  commits the epoch.
- The carrier's offset is `{"@event-time": {key: max}, "@event-time-run": the first epoch of this start}`, fixed
  for the whole start: `latestOffset` reads the maxima posted for the last epoch Spark committed once, as the query
  starts, and returns the same offset after that. Spark plans a source's rows only in an epoch where its offset
  moved, so the carrier's rows come in the first epoch a start plans and never again within it: within a run Spark
  keeps each input's watermark in memory, and the carrier makes no epoch of its own. `partitions(start, end)`
  carries the maxima of `end`. Offset keys starting with `@` are not topics (`checkpoint.spark_log`).
- An epoch Spark logged before a crash and replays now was logged with an earlier start's offset: before the query
  starts, its carrier lines get this start's number and the maxima posted for the epoch before it (`mark_replay`,
  the only write to Spark's offset log: the topics' lines stay as logged), so the replay carries them too.

Each input's maxima are kept by its watermark's carry key (`plan.event_time.carry_key`: its uid, or its sources
and timestamp), never by graph position: a new version that adds operators before the watermarks or builds them in
another order resumes each input from its own. Before a start, `prepare_carry` refuses a version that no longer
carries an input the checkpoint holds event time for (it would resume without it: another watermark than a run
without the upgrade, so other output from the same offsets), and renames the graph-position keys of files an older
version wrote.

So the first epoch after any restart, new or replayed, carries the largest event time of every epoch before it,
and the watermark of each input resumes where it was. The cost is one epoch of carrier rows at a start that finds
nothing new to read (nothing is read from Kafka, nothing moves the watermark, output is what the next epoch would
have written first).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructField, StructType

from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.paths import write_durably


class EventTimeError(EtherealKafkaError):
    """The event time of a query's inputs cannot be read or posted: a malformed maxima file (named), or no execution
    of the epoch to read it from. The epoch fails before Spark commits it; its retry writes nothing twice."""


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
#: The epoch a restore's seed is posted as (before a new checkpoint's epoch 0).
SEED_EPOCH = -1
#: The event-time column of a carrier row (the input's `__ts`).
TS_COLUMN = "__ts"


def observed_name(node_id: int) -> str:
    """The name of the observed metric (Spark's `observe`) holding watermark node `node_id`'s largest event time
    (µs); within one start only (the checkpoint keeps carry keys)."""
    return f"ek_event_time_{node_id}"


def maxima_path(query_checkpoint: str | Path) -> Path:
    """Where the maxima of the query whose Spark checkpoint folder is `query_checkpoint` are posted."""
    return Path(query_checkpoint) / FILE_NAME


def post_maxima(path: Path, epoch: int, maxima: Mapping[str, int]) -> None:
    """Record `maxima` (carry key → largest event time read up to and including `epoch`, µs since the
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
    """The maxima posted for the last epoch up to `through_epoch` (None: none committed yet → the seed a restore
    posted as epoch `SEED_EPOCH`, or empty)."""
    through = SEED_EPOCH if through_epoch is None else through_epoch
    found: dict[str, int] = {}
    for epoch, maxima in _entries(path):
        if epoch <= through:
            found = maxima
    return found


def seed_maxima(query_checkpoint: str | Path, maxima: Mapping[str, int]) -> None:
    """Before the first start of a query restored from a savepoint (a new checkpoint): post `maxima` (carry key →
    largest event time read before the savepoint, µs) as the epochs before epoch 0, so its first epoch carries them
    (`runtime.savepoint`)."""
    path = maxima_path(query_checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    post_maxima(path, SEED_EPOCH, maxima)


def _entries(path: Path) -> list[tuple[int, dict[str, int]]]:
    """The posted entries, by epoch; none before the first post.

    Raises:
        EventTimeError: the file is not what `post_maxima` writes.
    """
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        return sorted(
            (int(e["epoch"]), {str(k): int(v) for k, v in e["maxima"].items()})
            for e in body.get("entries", [])
        )
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EventTimeError(
            f"{path}: malformed event-time maxima ({exc}); restore it from a backup of the checkpoint, or replay "
            "the job into a new checkpoint"
        ) from exc


def last_committed(query_checkpoint: str | Path) -> int | None:
    """The last epoch Spark committed in the query's checkpoint (`commits/N`), None before the first."""
    return _last(Path(query_checkpoint) / "commits")


def _last(folder: Path) -> int | None:
    try:
        epochs = [int(p.name) for p in folder.iterdir() if p.name.isdigit()]
    except FileNotFoundError:
        return None
    return max(epochs) if epochs else None


def maxima_behind(query_checkpoint: str | Path) -> str | None:
    """One line when the posted maxima end before the last epoch Spark committed (a checkpoint from a version
    without them, or a file lost or restored from an older backup): the inputs then resume from the maxima that
    are there, as Spark alone would. None when they are up to date."""
    last = last_committed(query_checkpoint)
    path = maxima_path(query_checkpoint)
    posted = [epoch for epoch, _ in _entries(path)]
    if last is None or (posted and max(posted) >= last):
        return None
    through = f"epoch {max(posted)}" if posted else "no epoch"
    return (
        f"{path}: event-time maxima posted through {through}, Spark committed epoch {last}: a quiet input's "
        "watermark resumes from its next record after this start"
    )


def first_epoch(query_checkpoint: str | Path) -> int:
    """The first epoch a start of the query plans or replays: the one after the last committed."""
    last = last_committed(query_checkpoint)
    return 0 if last is None else last + 1


def prepare_carry(query_checkpoint: str | Path, carried: Mapping[int, str]) -> None:
    """Before a start of a query that carries its inputs' event time (`carried`: watermark node id → carry key):
    rename the keys of a maxima file an older version kept by node id (`"5"`) to this version's carry keys (how
    that version read them), then refuse when the last committed epoch's maxima name an input this version does
    not carry.

    Raises:
        EventTimeError: an input the checkpoint carries event time for is gone (one line naming it and the way
            out), or the file is malformed.
        OSError: the file cannot be rewritten.
    """
    path = maxima_path(query_checkpoint)
    entries = _entries(path)
    legacy = any(key.isdigit() for _, maxima in entries for key in maxima)
    if legacy:
        renamed = {str(node): key for node, key in carried.items()}
        entries = [(e, {renamed.get(k, k): v for k, v in m.items()}) for e, m in entries]
        body = {"entries": [{"epoch": e, "maxima": m} for e, m in entries]}
        write_durably(path, json.dumps(body, sort_keys=True))
    held = read_maxima(path, last_committed(query_checkpoint))
    gone = sorted(set(held) - set(carried.values()))
    if gone:
        now = ", ".join(sorted(carried.values())) or "none"
        raise EventTimeError(
            f"{path}: the checkpoint carries the event time of {', '.join(gone)}, which this version of the job "
            f"does not watermark (it carries {now}): it would resume with another watermark than the running job "
            "and give other output from the same offsets. Keep that watermark's sources and timestamp, or give "
            "the watermarks a .uid() that stays; else replay the job into a fresh checkpoint"
        )


def mark_replay(query_checkpoint: str | Path) -> int | None:
    """Before a start: give the carrier lines of the epoch Spark logged and did not commit (the one it replays) this
    start's number and the maxima posted for the epoch before it, so the replay plans the carrier's rows with them
    (see the module docstring); returns that epoch, or None when there is none.

    Raises:
        OSError: the offset log cannot be rewritten.
    """
    epoch = _last(Path(query_checkpoint) / "offsets")
    if epoch is None or epoch != first_epoch(query_checkpoint):
        return None
    path = Path(query_checkpoint) / "offsets" / str(epoch)
    lines = path.read_text(encoding="utf-8").split("\n")
    carried = {OFFSET_KEY: read_maxima(maxima_path(query_checkpoint), epoch - 1), RUN_KEY: epoch}
    changed = False
    for i, line in enumerate(lines[2:], start=2):
        if not line.startswith("{"):
            continue
        value = json.loads(line)
        if isinstance(value, dict) and OFFSET_KEY in value and value != carried:
            lines[i] = json.dumps(carried, separators=(",", ":"))
            changed = True
    if changed:
        write_durably(path, "\n".join(lines))
        # Hadoop's local file system keeps a checksum beside each log file and checks it only when present.
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
    return epoch


class CarrierPartition(InputPartition):
    """The one partition of an epoch: the largest event time its end offset carries for the input (µs)."""

    def __init__(self, micros: int) -> None:
        self.micros = micros


class EventTimeCarrierSource(DataSource):
    """`spark.readStream.format(FORMAT).options(checkpoint=<the query's Spark checkpoint folder>, node=<the
    watermark's carry key>, schema=<the input's schema as JSON>).load()`: rows of the input's schema, every column
    null but `__ts`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return carrier_schema(str(self.options["schema"]))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return CarrierReader(str(self.options["checkpoint"]), str(self.options["node"]), schema)


def carrier_schema(schema_json: str) -> StructType:
    """The carrier's schema: the input's (`StructType.json()`), every column nullable."""
    schema = StructType.fromJson(json.loads(schema_json))
    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


class CarrierReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. `availableNow` needs nothing fixed: the maxima are read at every planning."""

    def __init__(self, checkpoint: str, node: str, schema: StructType) -> None:
        self.checkpoint = checkpoint
        self.node = node
        names = schema.fieldNames()
        self.width = len(names)
        self.ts_index = names.index(TS_COLUMN)
        self.run = first_epoch(checkpoint)  # Spark builds the reader as the query starts, before any epoch
        self._offset: dict[str, Any] | None = None

    def initialOffset(self) -> dict[str, Any]:
        return {OFFSET_KEY: {}, RUN_KEY: -1}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to fix: an `availableNow` run reads the maxima as its epochs commit."""

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """This start's offset: the maxima posted for the last epoch Spark committed before it (read at the first
        call; its epoch's `foreachBatch` posted them before Spark committed it), and the start's number."""
        if self._offset is None:
            through = last_committed(self.checkpoint)
            self._offset = {OFFSET_KEY: read_maxima(maxima_path(self.checkpoint), through), RUN_KEY: self.run}
        return self._offset

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One partition carrying the input's maximum in `end` (none before it read anything); pure. Spark
        asks only in an epoch where the offset moved: the first of a start."""
        micros = end.get(OFFSET_KEY, {}).get(self.node)
        return [] if micros is None else [CarrierPartition(int(micros))]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release."""

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """The input's row: null everywhere but the event time."""
        assert isinstance(partition, CarrierPartition)
        row: list[Any] = [None] * self.width
        row[self.ts_index] = _EPOCH + datetime.timedelta(microseconds=partition.micros)
        yield tuple(row)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
