"""Phase one of the exactly-once protocol: one sink task attempt commits its output and its epoch marker atomically.

Runs inside a Spark task: `write_task` is the `mapInArrow` body of an epoch's write. Task i of epoch N
(`EpochWrite.slots[i]`) does, in this order:

1. **Fence.** It builds a producer of its own for the task's transactional id; `init_transactions` fences every
   older holder of the id (an earlier attempt of this task, a task of a crashed run, a producer abandoned inside a
   commit) and completes or aborts what that holder left open. From then on nothing older can commit.
2. **Owner.** The app's claim must still name this instance, else `FencedError`: an instance that was taken over
   writes nothing, even where its task fenced the new owner's producer for a moment.
3. **Marker.** If the task's marker records (app, checkpoint, N) over the epoch's input ranges, the epoch's output
   was committed before: the task reads its input to the end and writes nothing. A marker of this checkpoint for a
   later epoch, or for N over other ranges, is a `CheckpointMismatchError` (Spark's checkpoint is behind Kafka).
4. **Write.** Begin; encode and produce the input batch by batch as it arrives; send the marker with
   `send_offsets_to_transaction`; commit.

Reading the marker before fencing leaves a gap in which an older holder commits and the new attempt then writes the
same output again (`tests/integration/test_sink_task.py` reproduces it).

Errors by class: retriable → the same call again with bounded backoff; abortable → abort and redo from the input
batches kept (up to `RETAIN_BYTES`); fenced (a newer attempt of this task took the id) → never fence it back: stop
writing and wait for that attempt's marker (`_await_newer_attempt`); other fatal errors (timed out, invalid state)
→ close the producer and fence again with a new one, check the owner, re-read the marker (a commit may have landed
although the call failed) and redo only if needed. `send_offsets_to_transaction` stuck on a group coordinator that
left the cluster is given up (`connectors.kafka.stall`) and takes that path too. Reads of the marker and the claim
are retried while the group's coordinator moves (a replicated cluster losing a node), never taken for "nothing". A producer lives for one attempt and is closed after it, so a
healthy run never fences itself.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from pyspark.sql.types import ArrayType, DoubleType, IntegerType, LongType, StructField, StructType
from tenacity import retry, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

from ethereal_kafka import faults
from ethereal_kafka.connectors.kafka.clients import (
    FENCED_CODES,
    bounded_call,
    group_consumer,
    transactional_producer,
)
from ethereal_kafka.connectors.kafka.encoding import SINK_INDEX_COLUMN, OutRecord, encode_outputs
from ethereal_kafka.connectors.kafka.sink import TOO_LARGE_CODES, send_records, too_large
from ethereal_kafka.connectors.kafka.stall import send_offsets
from ethereal_kafka.eos.committed import read_marker
from ethereal_kafka.eos.dead_letters import forget, forget_user, take, take_user
from ethereal_kafka.eos.errors import FencedError, TransactionError
from ethereal_kafka.eos.markers import EpochMarker, OwnerClaim
from ethereal_kafka.eos.names import owner_group, progress_topic
from ethereal_kafka.eos.task_plan import EpochWrite, TaskSlot

T = TypeVar("T")

#: One summary row per task. `records` and `sink_records` (per sink of the query, in `outputs` order): the records
#: the epoch committed for the task, exactly-once figures: for a task that found its epoch committed before
#: (`skipped`: an earlier attempt of the epoch committed it, one the history records as failed or interrupted, or a
#: Spark task attempt that died after its commit), the records of the rows it read through, which are the ones that
#: attempt committed (a replay recomputes the same rows). `commit_ms`: how long `send_offsets_to_transaction` +
#: `commit_transaction` of the committing attempt took (null when none did). `operator_rows`: a chained query's
#: rows out of each of its steps in the task (`plan.chaining`; null for an unchained task, whose operators Spark
#: counts).
RESULT_SCHEMA = StructType(
    [
        StructField("task", IntegerType()),
        StructField("records", LongType()),
        StructField("skipped", IntegerType()),
        StructField("attempts", IntegerType()),
        StructField("sink_records", ArrayType(LongType())),
        StructField("commit_ms", DoubleType()),
        StructField("operator_rows", ArrayType(LongType())),
    ]
)
MAX_ATTEMPTS = 6

#: Per-call timeout of the transactional calls, and how long one call is retried while Kafka says "retriable".
#: Both are bounded: a commit that hangs (seen after a broker restart: librdkafka's EndTxn never answered) must
#: end in a new producer, whose `init_transactions` completes or aborts the transaction, not block the epoch.
CALL_TIMEOUT_S = 30.0
RETRY_DEADLINE_S = 60.0

#: Input kept in memory (Arrow batches, as they arrived) so that an aborted transaction can be redone within the
#: task. Epochs are bounded under exactly-once, so a task's share normally fits; past this the task stops keeping
#: its input, and a failure after that fails the task (Spark replays the epoch from its logged offsets).
RETAIN_BYTES = 256 * 1024 * 1024

_FATAL_CODES = FENCED_CODES | {KafkaError.INVALID_TXN_STATE, KafkaError._STATE, KafkaError._TIMED_OUT}


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and bool(exc.args and exc.args[0].retriable())


#: Errors of a committed-offsets read that mean "ask again": the group's coordinator moved or is loading (on a
#: replicated cluster, after its node died). librdkafka does not mark them retriable on `committed()`, but Kafka
#: does; taken as final they failed the task, and with it the job, on the first coordinator failover.
_COORDINATOR_MOVED = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError._WAIT_COORD,
    KafkaError._TRANSPORT,
}
#: Attempts of a read: its retries end by `RETRY_DEADLINE_S` rather than by count, so that they outlast a
#: coordinator failover (the broker's session timeout, 9 s by default, plus the coordinator's load).
READ_ATTEMPTS = 40


def _retriable_read(exc: BaseException) -> bool:
    """A read (committed offsets) is retried when Kafka says so, after a timeout (`committed()` reports a slow
    coordinator as `_TIMED_OUT`, which librdkafka does not mark retriable) and while the group's coordinator moves:
    a read that gave up must never be taken for "nothing committed"."""
    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    error = exc.args[0]
    return (
        bool(error.retriable()) or error.code() == KafkaError._TIMED_OUT or error.code() in _COORDINATOR_MOVED
    )


def _retry(
    call: Callable[[], T], retriable: Callable[[BaseException], bool] = _retriable, attempts: int = 8
) -> T:
    """The same call again while `retriable` says so (Kafka's retriable errors by default; bounded in attempts and
    in time)."""
    wrapped = retry(
        retry=retry_if_exception(retriable),
        stop=stop_after_attempt(attempts) | stop_after_delay(RETRY_DEADLINE_S),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        reraise=True,
    )(call)
    return wrapped()


class _Input:
    """The task's input batches: read once from Spark's iterator, kept (up to `RETAIN_BYTES`) for redoes."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._source = iter(batches)
        self._kept: list[pa.RecordBatch] = []
        self._kept_bytes = 0
        self.complete = True  # every batch read so far is kept
        self.exhausted = False

    def first_pass(self) -> Iterator[pa.RecordBatch]:
        """Every batch from Spark, kept while the budget allows."""
        for batch in self._source:
            if self.complete:
                self._kept_bytes += batch.nbytes
                if self._kept_bytes <= RETAIN_BYTES:
                    self._kept.append(batch)
                else:
                    self.complete = False
                    self._kept.clear()
            yield batch
        self.exhausted = True

    def again(self) -> Iterator[pa.RecordBatch]:
        """The kept batches, then whatever Spark has not handed over yet.

        Raises:
            TransactionError: part of the input is gone (past `RETAIN_BYTES`), so it cannot be produced again.
        """
        if not self.complete:
            raise TransactionError(
                f"the task's input outgrew the {RETAIN_BYTES >> 20} MiB kept for redoing a transaction; the epoch "
                "fails and is replayed (lower max.bytes.per.epoch / max.records.per.epoch)"
            )
        kept = list(self._kept)
        yield from kept
        if not self.exhausted:
            yield from self.first_pass()

    def drain(self) -> None:
        """Read what Spark still has (a skipped task must consume its input all the same)."""
        for _ in self._source:
            pass
        self.exhausted = True


class TransactionalTask:
    """Commits one task's records and marker exactly once (see the module docstring); one instance per attempt."""

    def __init__(self, write: EpochWrite, index: int, attempt_id: int = -1) -> None:
        """`attempt_id`: the Spark task attempt (whose operators left user-code dead letters for it).

        Raises:
        TransactionError: the epoch has no slot for task `index` (more Spark partitions than slots): nothing
            may be written under an identity the coordinator does not know.
        """
        if not 0 <= index < len(write.slots):
            raise TransactionError(
                f"query {write.query}, epoch {write.epoch}: sink task {index} has no slot ({len(write.slots)} "
                "planned); a partition-preserving job must keep one Spark partition per Kafka partition"
            )
        self.write = write
        self.index = index
        self.attempt_id = attempt_id
        self.slot: TaskSlot = write.slots[index]
        self.txn_id = write.transactional_id(self.slot)
        sink = write.sink
        self.consumer = group_consumer(sink.bootstrap_servers, self.slot.marker_group, sink.passthrough)
        self.attempts = 0
        self.commit_ms: float | None = None
        self.records = 0
        self.dead_lettered = 0
        self._producer: Producer | None = None
        self._too_large: list[tuple[str, bytes | None, bytes | None, str]] = []
        self._began = time.monotonic()  # when the current transaction began

    def commit(self, batches: Iterable[pa.RecordBatch]) -> bool:
        """Commit the records of `batches` with the marker; returns False when the epoch was committed before
        (nothing sent; the input is read to the end all the same).

        Raises:
            FencedError: another instance owns the app.
            TransactionError: no commit after `MAX_ATTEMPTS` attempts, or a redo needed input no longer kept.
        """
        source = _Input(batches)
        self._trace(faults.START)
        try:
            if not self._fence_and_check():
                source.drain()
                self._forget()
                return False
            write = self.write
            marker = EpochMarker(write.app_id, write.checkpoint_id, write.epoch, write.ranges).render()
            offsets = [
                TopicPartition(
                    self.slot.marker_topic, self.slot.marker_partition, self.slot.marker_offset, marker
                )
            ]
            last: Exception | None = None
            for attempt in range(MAX_ATTEMPTS):
                self.attempts = attempt + 1
                try:
                    self._transaction(
                        source.first_pass() if attempt == 0 else source.again(), offsets, attempt
                    )
                    self._forget()
                    return True
                except KafkaException as exc:
                    last = exc
                    error = exc.args[0] if exc.args else None
                    if self._producer is not None:
                        with contextlib.suppress(KafkaException):
                            self._producer.poll(0)  # serves the delivery reports the commit left unserved
                    if self._too_large:
                        topic, key, value, cause = self._too_large[0]
                        raise too_large(topic, key, value, self._where(), cause) from exc
                    if error is not None and error.code() in FENCED_CODES and not self._outlived_timeout():
                        # A newer attempt of this task holds the id (the broker's own abort of a transaction that
                        # outlived its timeout bumps the epoch too, but only once the timeout passed): it writes
                        # the epoch, and this one never fences it back (two live attempts would fence each other
                        # until both gave up).
                        self._await_newer_attempt(exc)
                        source.drain()
                        self._forget()
                        return True
                    # Fatal for this producer: fence again with a new one; the commit may have landed.
                    if not self._abort(error) and not self._fence_and_check():
                        source.drain()
                        self._forget()
                        return True
                time.sleep(min(2.0, 0.1 * 2**attempt))
            raise TransactionError(
                f"{self.txn_id}: epoch {self.write.epoch} not committed after {MAX_ATTEMPTS} attempts: {last}"
            ) from last
        finally:
            self._close()

    # -- the steps -----------------------------------------------------------------------------------------------
    def _fence_and_check(self) -> bool:
        """Fence older holders with a new producer, check the owner, read the marker; True when the epoch still
        has to be written."""
        self._close()
        self._producer = _retry(
            lambda: transactional_producer(
                self.txn_id,
                self.write.sink.bootstrap_servers,
                self.write.transaction_timeout_ms,
                self.write.sink.passthrough,
            )
        )
        self._check_owner()
        if self._committed():
            self._trace(faults.SKIP)
            return False
        faults.hook("after_marker", self.index)
        return True

    def _committed(self) -> bool:
        """True when the task's marker records this epoch over its ranges (read stably, retried, never read as
        absent after an error).

        Raises:
            CheckpointMismatchError: the marker is of a later epoch, or of this one over other ranges.
        """
        slot, write = self.slot, self.write
        marker = _retry(
            lambda: read_marker(self.consumer, slot.marker_topic, slot.marker_partition),
            _retriable_read,
            READ_ATTEMPTS,
        )
        where = f"group {slot.marker_group}, {slot.marker_topic}[{slot.marker_partition}]"
        return marker is not None and marker.committed(
            write.app_id, write.checkpoint_id, write.epoch, write.ranges, where
        )

    def _outlived_timeout(self) -> bool:
        """True when this attempt's transaction has been open for the transaction timeout: then the broker may have
        aborted it (and fenced the producer) itself, and fencing again is the way on."""
        return time.monotonic() - self._began >= self.write.transaction_timeout_ms / 1000

    def _await_newer_attempt(self, cause: KafkaException) -> None:
        """This attempt's producer was fenced: unless another instance took the app over (`FencedError`), a newer
        attempt of this task holds the id and writes the epoch. Wait (up to the transaction timeout, after which
        the broker has ended whatever that attempt left open) until the marker records the epoch.

        Raises:
            FencedError: another instance owns the app.
            TransactionError: the newer attempt did not commit the epoch in time (the task fails; the epoch is
                replayed, and its output is written once).
        """
        self._close()
        self._check_owner()
        deadline = time.monotonic() + self.write.transaction_timeout_ms / 1000 + CALL_TIMEOUT_S
        while True:
            if self._committed():
                self._trace(faults.SKIP)
                return
            if time.monotonic() > deadline:
                raise TransactionError(
                    f"{self.txn_id}: epoch {self.write.epoch}: fenced by another attempt of the task ({cause}), "
                    "which did not commit the epoch within the transaction timeout; the task fails"
                ) from cause
            time.sleep(0.2)

    def _check_owner(self) -> None:
        sink = self.write.sink
        consumer = group_consumer(sink.bootstrap_servers, owner_group(self.write.app_id), sink.passthrough)
        claim = [TopicPartition(progress_topic(self.write.app_id), 0)]
        found = _retry(lambda: _committed_or_raise(consumer, claim), _retriable_read, READ_ATTEMPTS)
        owner = OwnerClaim.parse(found[0].metadata) if found and found[0].offset >= 0 else None
        if owner is None:
            raise FencedError(
                f"app {self.write.app_id}: the owner claim (group {owner_group(self.write.app_id)}) is gone or "
                f"unreadable; this instance ({self.write.instance_id}) stops rather than write unclaimed"
            )
        if owner.instance_id != self.write.instance_id:
            raise FencedError(
                f"app {self.write.app_id}: another instance ({owner.instance_id}) took over; this one "
                f"({self.write.instance_id}) stops"
            )

    def _transaction(
        self, batches: Iterable[pa.RecordBatch], offsets: list[TopicPartition], attempt: int
    ) -> None:
        """One transaction: begin, produce while reading, offsets with the marker, commit (retriable calls are
        retried in place). Raises KafkaException on failure."""
        producer = self._producer
        assert producer is not None
        producer.begin_transaction()
        self._began = time.monotonic()
        self._trace(faults.OPEN)
        # A failed delivery fails the commit (an abortable error); the callback only keeps the deliveries the broker
        # refused for their size, which no retry can fix (`_refused_for_size`).
        where = self._where()
        self.records = send_records(
            producer, encode_outputs(self.write.outputs, batches), self._on_delivery, where
        )
        self.dead_lettered = send_records(producer, self._dead_letters(), self._on_delivery, where)
        if attempt == 0:
            faults.hook("in_transaction", self.index)
            faults.fail_before_commit(self.index)
            delay_s = faults.txn_delay_s()
            if delay_s:
                time.sleep(delay_s)
        metadata = self.consumer.consumer_group_metadata()
        committing = time.perf_counter()
        # A call stuck on a group coordinator that left the cluster is given up (`kafka.stall`) and ends in a new
        # producer (the fatal path of `commit`), which looks the coordinator up afresh.
        sink = self.write.sink
        _retry(lambda: send_offsets(producer, offsets, metadata, sink.bootstrap_servers, sink.passthrough))
        self._trace(faults.COMMIT)
        _retry(
            lambda: bounded_call("commit_transaction", lambda: producer.commit_transaction(CALL_TIMEOUT_S))
        )
        self.commit_ms = (time.perf_counter() - committing) * 1000
        self._trace(faults.DONE)
        if attempt == 0:
            faults.after_commit("phase_one")

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        """Keep the deliveries the broker refused for their size (served while the commit flushes)."""
        if error is not None and error.code() in TOO_LARGE_CODES:
            self._too_large.append((message.topic() or "?", message.key(), message.value(), error.str()))

    def _where(self) -> str:
        """The sink task and its input, as errors name them."""
        slot, write = self.slot, self.write
        task = f"sink {write.query}, epoch {write.epoch}, task {self.index} ({self.txn_id}"
        if slot.start_offset >= 0:
            return f"{task}; input {slot.marker_topic}[{slot.marker_partition}] offsets {slot.start_offset}..{slot.marker_offset})"
        return f"{task})"

    def _dead_letters(self) -> Iterator[OutRecord]:
        """The dead letters the read of this task's range left (partition-preserving, `on.error=dlq`) and those its
        operators left for user-code errors (`on.user.error=dlq`): committed in this transaction, with the output
        and the input offset."""
        if self.slot.start_offset < 0:
            return
        topic = self.write.dead_letter_topic
        if topic is not None:
            for letter in take(*self._range()):
                yield OutRecord(letter.target or topic, None, letter.key, letter.value, list(letter.headers))
        if self.write.user_dead_letters:
            for letter in take_user(self.slot.marker_group, self.attempt_id):
                yield OutRecord(str(letter.target), None, letter.key, letter.value, list(letter.headers))

    def _forget(self) -> None:
        if self.slot.start_offset < 0:
            return
        if self.write.dead_letter_topic is not None:
            forget(*self._range())
        if self.write.user_dead_letters:
            forget_user(self.slot.marker_group, self.attempt_id)

    def _range(self) -> tuple[str, str, int, int, int]:
        slot = self.slot
        return (
            slot.marker_group,
            slot.marker_topic,
            slot.marker_partition,
            slot.start_offset,
            slot.marker_offset,
        )

    def _abort(self, error: KafkaError | None) -> bool:
        """After a failed transaction: abort it when the error allows (True), else report it fatal (False)."""
        fatal = error is None or error.fatal() or error.code() in _FATAL_CODES
        producer = self._producer
        if fatal or producer is None:
            return False
        try:
            _retry(
                lambda: bounded_call("abort_transaction", lambda: producer.abort_transaction(CALL_TIMEOUT_S))
            )
            return True
        except KafkaException:
            return False

    def _close(self) -> None:
        """Let go of this attempt's producer (its transaction is committed, aborted, or fenced by the next)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(KafkaException):  # a fenced producer raises its fatal error again
                producer.flush(0)

    def _trace(self, step: str) -> None:
        faults.trace(self.write.query, self.write.epoch, self.index, step)


def _committed_or_raise(consumer: Any, tps: list[TopicPartition]) -> list[TopicPartition]:
    """`consumer.committed(tps)`, raising a partition's error instead of returning it (a partition of a topic that
    does not exist has nothing committed: it comes back with no offset)."""
    found: list[TopicPartition] = consumer.committed(tps, timeout=30)
    for tp in found:
        if tp.error is not None and tp.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise KafkaException(tp.error)
    return [TopicPartition(tp.topic, tp.partition) if tp.error is not None else tp for tp in found]


def write_task(write: EpochWrite, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` body of one sink task: commit the task's rows exactly once; yields one summary row
    (`RESULT_SCHEMA`: a task whose epoch was committed before reports the records of that commit)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    index = context.partitionId() if context is not None else 0
    attempt = context.taskAttemptId() if context is not None else -1
    per_sink = [0] * len(write.outputs)
    task = TransactionalTask(write, index, attempt)
    committed = task.commit(count_rows(batches, per_sink))
    yield summary_batch(index, task, committed, per_sink)


def summary_batch(
    index: int,
    task: TransactionalTask,
    committed: bool,
    per_sink: list[int],
    operator_rows: list[int] | None = None,
) -> pa.RecordBatch:
    """Task `index`'s summary row (`RESULT_SCHEMA`) after `task.commit` returned `committed`."""
    return pa.RecordBatch.from_pydict(
        {
            "task": pa.array([index], pa.int32()),
            "records": pa.array([task.records if committed else sum(per_sink)], pa.int64()),
            "skipped": pa.array([0 if committed else 1], pa.int32()),
            "attempts": pa.array([task.attempts], pa.int32()),
            "sink_records": pa.array([per_sink], pa.list_(pa.int64())),
            "commit_ms": pa.array([task.commit_ms if committed else None], pa.float64()),
            "operator_rows": pa.array([operator_rows], pa.list_(pa.int64())),
        }
    )


def count_rows(batches: Iterator[pa.RecordBatch], per_sink: list[int]) -> Iterator[pa.RecordBatch]:
    """Pass the batches through, adding each row to its sink's count (by `__sink` when the query has several)."""
    import pyarrow.compute as pc

    for batch in batches:
        if len(per_sink) == 1 or SINK_INDEX_COLUMN not in batch.schema.names:
            per_sink[0] += batch.num_rows
        else:
            for entry in pc.value_counts(batch.column(SINK_INDEX_COLUMN)).to_pylist():
                if entry["values"] is not None and 0 <= entry["values"] < len(per_sink):
                    per_sink[entry["values"]] += entry["counts"]
        yield batch
