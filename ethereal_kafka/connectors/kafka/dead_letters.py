"""Dead letters under exactly-once: a poison record reaches the dead-letter topic exactly once, committed with
the epoch that read it.

A read task that finds poison records (`on.error=dlq`) does not produce them itself when the job runs
exactly-once (the source's `dlq.delivery=epoch`, set by the job runner). It hands them on two ways, because it
cannot know which query shape it serves:

* **Task-local handoff** (partition-preserving queries): the read and the sink write of one Kafka partition run in
  the same Spark task on one executor, the read finishing first. The read leaves its dead letters in a file named
  after its offset range (`leave`); the sink task takes them (`take`) and produces them in its own transaction,
  with the epoch's output and the input partition's offset: one atomic commit.
* **To the driver** (shuffling queries): a report per range on an accumulator (`DEAD_LETTERS_ACCUMULATOR_ID`), merged
  on the driver as read tasks succeed, before the epoch's write returns. The coordinator produces the epoch's dead
  letters in the transaction of its phase two, with the epoch's input offsets (and writes nothing when a replay
  finds those offsets committed already).

Spark may run a read more than once (a retried task, a recomputed stage); both ways key dead letters by their
source topic, partition and offset, so a record is produced once per epoch.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ethereal_kafka.serde import SerdeError

#: Header names on dead-letter records.
DLQ_HEADERS = (
    "ethereal.error.class",
    "ethereal.error.message",
    "ethereal.error.field",
    "ethereal.source.topic",
    "ethereal.source.partition",
    "ethereal.source.offset",
    "ethereal.source.timestamp",
)

#: Id of the accumulator carrying dead letters to the driver (negative: never one SparkContext hands out).
DEAD_LETTERS_ACCUMULATOR_ID = -0x64_6C_71_31

#: Where read tasks leave dead letters for the sink task of the same Spark task; files older than this are
#: removed by later reads (a shuffling query leaves its files: its dead letters go through the driver).
HANDOFF_TTL_S = 3600.0


@dataclass(frozen=True)
class DeadLetter:
    """One poison record as it goes to the dead-letter topic: the raw key and value, the record's headers plus
    ours (`DLQ_HEADERS`), and where it came from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class DeadLetterReport:
    """The dead letters of one read range (pickled from an executor to the driver)."""

    group: str
    topic: str
    partition: int
    start: int
    until: int
    letters: tuple[DeadLetter, ...] = field(default_factory=tuple)


def dead_letters_of(raw: pa.RecordBatch, errors: dict[int, SerdeError]) -> list[DeadLetter]:
    """The dead letters of the rows of `raw` that failed to deserialize (`errors` by row), in row order."""
    timestamps = raw.column("timestamp").cast(pa.int64()).to_pylist()
    headers = raw.column("headers").to_pylist()
    out = []
    for row in sorted(errors):
        error = errors[row]
        topic = str(raw.column("topic")[row].as_py())
        partition = int(raw.column("partition")[row].as_py())
        offset = int(raw.column("offset")[row].as_py())
        meta = (
            type(error.__cause__ or error).__name__ if error.cause_class is None else error.cause_class,
            error.message,
            error.field,
            topic,
            str(partition),
            str(offset),
            str((timestamps[row] or 0) // 1000),
        )
        origin = [(h["key"], h["value"]) for h in (headers[row] or [])]
        ours = [(k, v.encode()) for k, v in zip(DLQ_HEADERS, meta, strict=True)]
        out.append(
            DeadLetter(
                topic,
                partition,
                offset,
                raw.column("key")[row].as_py(),
                raw.column("value")[row].as_py(),
                tuple(origin + ours),
            )
        )
    return out


def handoff_path(group: str, topic: str, partition: int, start: int, until: int) -> Path:
    """The task-local file of one read range's dead letters (in the executor's temp folder)."""
    folder = Path(tempfile.gettempdir()) / "ethereal-kafka-dead-letters"
    return folder / f"{group}@{topic}@{partition}@{start}-{until}.pickle"


def leave(report: DeadLetterReport) -> None:
    """Read side: leave a range's dead letters for the sink task of the same Spark task, and report them to the
    driver; removes handoff files older than `HANDOFF_TTL_S`. Never raises for the driver report."""
    from ethereal_kafka.connectors.kafka.read_stats import publish

    path = handoff_path(report.group, report.topic, report.partition, report.start, report.until)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_bytes(pickle.dumps(report.letters))
    os.replace(partial, path)
    with contextlib.suppress(Exception):
        publish(report, DEAD_LETTERS_ACCUMULATOR_ID)
    now = time.time()
    for old in path.parent.iterdir():
        with contextlib.suppress(OSError):
            if now - old.stat().st_mtime > HANDOFF_TTL_S:
                old.unlink()


def take(group: str, topic: str, partition: int, start: int, until: int) -> list[DeadLetter]:
    """Sink side (partition-preserving): the dead letters the read of this range left (none when it found none).
    The file stays until `forget` (a redone transaction needs them again)."""
    path = handoff_path(group, topic, partition, start, until)
    try:
        letters: Sequence[DeadLetter] = pickle.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    return list(letters)


def forget(group: str, topic: str, partition: int, start: int, until: int) -> None:
    """Remove a range's handoff file once its dead letters are committed (or were committed before)."""
    handoff_path(group, topic, partition, start, until).unlink(missing_ok=True)


def unique(letters: Iterable[DeadLetter]) -> list[DeadLetter]:
    """Each record once (a read run twice reports its dead letters twice), in (topic, partition, offset) order."""
    by_origin = {(d.topic, d.partition, d.offset): d for d in letters}
    return [by_origin[k] for k in sorted(by_origin)]
