"""Dead letters under exactly-once: a poison record reaches the dead-letter topic exactly once, committed with
the epoch that read it.

A read task that finds poison records (`on.error=dlq`) does not produce them itself when the job runs
exactly-once (the source's `dlq.delivery=epoch`, set by the job runner). It hands them on two ways, because it
cannot know which query shape it serves (`eos.source.ExactlyOnceKafkaSource` calls `leave`):

* **Task-local handoff** (partition-preserving queries): the read and the sink write of one Kafka partition run in
  the same Spark task on one executor, the read finishing first. The read leaves its dead letters in a file named
  after its offset range (`leave`); the sink task takes them (`take`) and produces them in its own transaction,
  with the epoch's output and the input partition's offset: one atomic commit (`eos.phase_one`).
* **To the driver** (shuffling queries): a report per range on an accumulator (`DEAD_LETTERS_ACCUMULATOR_ID`), kept
  on the driver by a `DeadLetterCollector` as read tasks succeed, before the epoch's write returns. Phase two
  produces the epoch's dead letters in its transaction, with the epoch's input offsets (and writes nothing when a
  replay finds those offsets committed already; `eos.phase_two`).

Spark may run a read more than once (a retried task, a recomputed stage); both ways key dead letters by their
source topic, partition and offset, so a record is produced once per epoch.

Elements that made user code raise (`on.user.error=dlq`) travel the same two ways (`EpochHandoff`, which the plan's
operators are given): a task-local file named after the Spark task attempt, which the sink task of that attempt
takes (partition-preserving: the operator and the sink run in one task), and a report to the driver whose letters
phase two takes by offset: every letter of a source partition below the epoch's end offset (a shuffling query's
epochs run one after the other, so those are the epoch's). They are keyed by their source record, the operator's
uid and the element's rank, so a task run twice dead-letters an element once.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import TopicPartition

from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter
from ethereal_kafka.connectors.kafka.read_stats import ReportChannel, publish

#: Id of the accumulator carrying dead letters to the driver (negative: never one SparkContext hands out).
DEAD_LETTERS_ACCUMULATOR_ID = -0x64_6C_71_31

#: Where read tasks leave dead letters for the sink task of the same Spark task; files older than this are
#: removed by later reads (a shuffling query leaves its files: its dead letters go through the driver).
HANDOFF_TTL_S = 3600.0


@dataclass(frozen=True)
class DeadLetterReport:
    """The dead letters of one read range (pickled from an executor to the driver)."""

    group: str
    topic: str
    partition: int
    start: int
    until: int
    letters: tuple[DeadLetter, ...] = field(default_factory=tuple)


def handoff_path(group: str, topic: str, partition: int, start: int, until: int) -> Path:
    """The task-local file of one read range's dead letters (in the executor's temp folder)."""
    folder = Path(tempfile.gettempdir()) / "ethereal-kafka-dead-letters"
    return folder / f"{group}@{topic}@{partition}@{start}-{until}.pickle"


def leave(report: DeadLetterReport) -> None:
    """Read side: leave a range's dead letters for the sink task of the same Spark task, and report them to the
    driver; removes handoff files older than `HANDOFF_TTL_S`. Never raises for the driver report."""
    path = handoff_path(report.group, report.topic, report.partition, report.start, report.until)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_bytes(pickle.dumps(report.letters))
    os.replace(partial, path)
    with contextlib.suppress(Exception):
        publish(report, DEAD_LETTERS_ACCUMULATOR_ID)
    _sweep(path.parent)


def _sweep(folder: Path) -> None:
    """Remove handoff files older than `HANDOFF_TTL_S` (those of task attempts that failed, of shuffling queries)."""
    now = time.time()
    for old in folder.iterdir():
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
    """Each letter once (a read run twice reports its dead letters twice), in (topic, partition, offset) order."""
    by_origin = {d.identity: d for d in letters}
    return [by_origin[k] for k in sorted(by_origin)]


#: `DeadLetterReport.until` of a report whose letters phase two places by their own offsets (user-code errors).
BY_OFFSET = -1


def _user_path(group: str, attempt: int, part: str) -> Path:
    folder = Path(tempfile.gettempdir()) / "ethereal-kafka-dead-letters"
    return folder / f"{group}@task-{attempt}@{part}.user.pickle"


@dataclass(frozen=True)
class EpochHandoff:
    """Where an operator leaves the dead letters of user-code errors under exactly-once (`on.user.error=dlq`), so
    that they commit with their epoch (see the module docstring). Picklable: the plan's operators carry it to the
    executors and call `keep` in the Spark task that found the letters."""

    def keep(self, group: str, letters: Sequence[DeadLetter]) -> None:
        """Leave `letters` (of source records read under `group`) for the sink task of this task attempt, and
        report them to the driver for phase two. A no-op without letters."""
        if not letters:
            return
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.taskAttemptId() if context is not None else -1
        path = _user_path(group, attempt, f"{os.getpid()}-{time.monotonic_ns()}")
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(tuple(letters)))
        os.replace(partial, path)
        _sweep(path.parent)
        with contextlib.suppress(Exception):
            publish(
                DeadLetterReport(group, "", -1, BY_OFFSET, BY_OFFSET, tuple(letters)),
                DEAD_LETTERS_ACCUMULATOR_ID,
            )


def take_user(group: str, attempt: int) -> list[DeadLetter]:
    """Sink side (partition-preserving): the user-code dead letters the operators of this task attempt left (of
    source records read under `group`), once each. The files stay until `forget_user`."""
    letters: list[DeadLetter] = []
    for path in _user_path(group, attempt, "*").parent.glob(_user_path(group, attempt, "*").name):
        with contextlib.suppress(FileNotFoundError):
            letters.extend(pickle.loads(path.read_bytes()))
    return unique(letters)


def forget_user(group: str, attempt: int) -> None:
    """Remove this task attempt's user-code dead-letter files once they are committed (or were before)."""
    pattern = _user_path(group, attempt, "*")
    for path in pattern.parent.glob(pattern.name):
        path.unlink(missing_ok=True)


class DeadLetterCollector:
    """The driver's side of the shuffling queries' dead letters: keeps what read tasks and operators report (on the
    accumulator server's thread) until phase two of their epoch takes them. Thread-safe.

    Args:
        groups: The consumer groups whose reads and operators hand their dead letters to phase two (the groups of
            shuffling queries reading a source with `on.error=dlq`, or of a job with `on.user.error=dlq`, under
            exactly-once); reports of other groups are ignored (partition-preserving sink tasks commit their own).
    """

    def __init__(self, groups: Iterable[str]) -> None:
        self.groups = frozenset(groups)
        self._letters: dict[tuple[str, str, int, int], list[DeadLetter]] = {}
        self._by_offset: dict[tuple[str, str, int], list[DeadLetter]] = {}  # (group, topic, partition)
        self._lock = threading.Lock()
        self._channel: ReportChannel | None = None

    def open(self) -> None:
        """Start listening on the accumulator (a no-op without groups, or when already listening)."""
        if self.groups and self._channel is None:
            self._channel = ReportChannel(self.add, DEAD_LETTERS_ACCUMULATOR_ID, DeadLetterReport)
            self._channel.open()

    def close(self) -> None:
        """Stop listening (idempotent)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def add(self, reports: list[DeadLetterReport]) -> None:
        """Keep the reports of this collector's groups, by range (`group`, topic, partition, range end)."""
        with self._lock:
            for report in reports:
                if report.group not in self.groups:
                    continue
                if report.until == BY_OFFSET:
                    for letter in report.letters:
                        place = (report.group, letter.topic, letter.partition)
                        self._by_offset.setdefault(place, []).append(letter)
                    continue
                key = (report.group, report.topic, report.partition, report.until)
                self._letters.setdefault(key, []).extend(report.letters)

    def take(self, group: str, ends: Iterable[TopicPartition]) -> list[DeadLetter]:
        """The dead letters the reads of these ranges reported (`ends` carry each range's end offset), once each,
        in (topic, partition, offset) order; they are forgotten here."""
        with self._lock:
            taken = [self._letters.pop((group, tp.topic, tp.partition, tp.offset), []) for tp in ends]
            for tp in ends:
                kept = self._by_offset.get((group, tp.topic, tp.partition), [])
                taken.append([d for d in kept if d.offset < tp.offset])
                later = [d for d in kept if d.offset >= tp.offset]
                if later:
                    self._by_offset[(group, tp.topic, tp.partition)] = later
                else:
                    self._by_offset.pop((group, tp.topic, tp.partition), None)
        return unique(d for letters in taken for d in letters)
