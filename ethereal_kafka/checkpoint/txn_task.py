"""Phase one of the exactly-once protocol: one sink task commits its output and its epoch marker atomically.

Runs inside a Spark task (`mapInArrow` over the epoch's DataFrame). For task i of epoch N (see `EpochPlan`):

1. encode the task's rows (kept in memory: at most one epoch's share, bounded by `max.records.per.epoch`);
2. read the task's marker; if it proves epoch N was committed under this checkpoint, write nothing (a replay);
3. `begin_transaction`, produce, `send_offsets_to_transaction` with the marker, `commit_transaction`.

Errors are handled by class: retriable → the same call again with bounded backoff; abortable → abort and redo the
task from the buffer; fatal (fenced, timed out, invalid epoch) → drop the producer, build a new one (which fences
every older holder of the id and completes its transaction), re-read the marker, and redo only if still needed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from tenacity import retry, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

from ethereal_kafka import faults
from ethereal_kafka.checkpoint.clients import (
    drop_transactional_producer,
    group_consumer,
    read_marker,
    transactional_producer,
)
from ethereal_kafka.checkpoint.errors import FencedError, TransactionError
from ethereal_kafka.checkpoint.markers import EpochMarker
from ethereal_kafka.checkpoint.plan import SINK_INDEX_COLUMN, EpochPlan, TaskSlot, progress_topic
from ethereal_kafka.connectors.kafka.encoding import OutRecord, encode_outputs
from ethereal_kafka.connectors.kafka.sink import send_records

T = TypeVar("T")

#: One summary row per task. `sink_records`: records per sink of the query (in `outputs` order); `commit_ms`: how
#: long `send_offsets_to_transaction` + `commit_transaction` of the committing attempt took (null when none did).
RESULT_SCHEMA = (
    "task int, records long, skipped int, attempts int, sink_records array<bigint>, commit_ms double"
)
MAX_ATTEMPTS = 6

#: Per-call timeout of the transactional calls, and how long one call is retried while Kafka says "retriable".
#: Both are bounded: a commit that hangs (seen after a broker restart: librdkafka's EndTxn never answered) must
#: end in `_recover`, whose new producer completes or aborts the transaction, not block the epoch for minutes.
CALL_TIMEOUT_S = 30.0
RETRY_DEADLINE_S = 60.0

_FATAL_CODES = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.INVALID_TXN_STATE,
    KafkaError._STATE,
}


def owner_group(app_id: str) -> str:
    """The group whose offset on progress partition 0 names the instance that owns the app."""
    return f"{app_id}.ethereal-owner"


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and bool(exc.args and exc.args[0].retriable())


def _bounded(what: str, call: Callable[[], T], timeout_s: float = CALL_TIMEOUT_S) -> T:
    """Run a blocking transactional call, giving up after `timeout_s` even when the client does not.

    librdkafka's `send_offsets_to_transaction` ignores its timeout and can block forever once the group
    coordinator was restarted (confluentinc/librdkafka#5456, #5511; seen here after a broker restart). The call
    runs in a daemon thread (the client releases the GIL); if it has not returned in time the caller gets a
    non-retriable `_TIMED_OUT` error, `_recover` drops the producer, and the new producer's `init_transactions`
    fences the stuck one. The stuck thread is abandoned: it holds only the dropped producer.

    Raises:
        KafkaException: what the call raised, or `_TIMED_OUT` when it did not return in time.
    """
    outcome: dict[str, object] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=f"ethereal-kafka-{what}", daemon=True).start()
    if not done.wait(timeout_s + 5.0):
        raise KafkaException(
            KafkaError(KafkaError._TIMED_OUT, f"{what} did not return within {timeout_s + 5.0:.0f}s")
        )
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome.get("value")  # type: ignore[return-value]


def _retry(call: Callable[[], T]) -> T:
    """The same call again while Kafka says it is retriable (bounded in attempts and in time)."""
    wrapped = retry(
        retry=retry_if_exception(_retriable),
        stop=stop_after_attempt(8) | stop_after_delay(RETRY_DEADLINE_S),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        reraise=True,
    )(call)
    return wrapped()


class TransactionalTask:
    """Commits one task's records and marker exactly once (see the module docstring)."""

    def __init__(self, plan: EpochPlan, index: int) -> None:
        self.plan = plan
        self.index = index
        self.slot: TaskSlot = plan.slots[index]
        self.txn_id = plan.transactional_id(self.slot)
        sink = plan.sink
        self.consumer = group_consumer(sink.bootstrap_servers, self.slot.marker_group, sink.passthrough)
        self.attempts = 0
        self.commit_ms: float | None = None

    def _committed_before(self) -> bool:
        marker = _retry(
            lambda: read_marker(self.consumer, self.slot.marker_topic, self.slot.marker_partition)
        )
        return marker is not None and marker.covers(
            self.plan.app_id, self.plan.checkpoint_id, self.plan.epoch
        )

    def _check_owner(self) -> None:
        sink = self.plan.sink
        consumer = group_consumer(sink.bootstrap_servers, owner_group(self.plan.app_id), sink.passthrough)
        claim = [TopicPartition(progress_topic(self.plan.app_id), 0)]
        found = _retry(lambda: consumer.committed(claim, timeout=30))
        owner = found[0].metadata if found else None
        if owner and owner != self.plan.instance_id:
            raise FencedError(
                f"app {self.plan.app_id}: another instance ({owner}) took over; this one ({self.plan.instance_id}) "
                "stops"
            )

    def commit(self, records: list[OutRecord]) -> bool:
        """Commit `records` with the marker; returns False when the epoch was committed before (nothing sent).

        Raises:
            FencedError: another instance owns the app.
            TransactionError: no commit after `MAX_ATTEMPTS` attempts.
        """
        if self._committed_before():
            self._trace(faults.SKIP)
            return False
        marker = EpochMarker(self.plan.app_id, self.plan.checkpoint_id, self.plan.epoch).render()
        offsets = [
            TopicPartition(
                self.slot.marker_topic, self.slot.marker_partition, self.slot.marker_offset, marker
            )
        ]
        last: Exception | None = None
        for attempt in range(MAX_ATTEMPTS):
            self.attempts = attempt + 1
            try:
                self._attempt(records, offsets, first=attempt == 0)
                return True
            except KafkaException as exc:
                last = exc
                self._recover(exc.args[0] if exc.args else None)
            if self._committed_before():
                return True  # the commit landed although the call reported an error
            time.sleep(min(2.0, 0.1 * 2**attempt))
        raise TransactionError(
            f"{self.txn_id}: epoch {self.plan.epoch} not committed after {MAX_ATTEMPTS} attempts: {last}"
        ) from last

    def _producer(self) -> Producer:
        sink = self.plan.sink
        return transactional_producer(
            self.txn_id, sink.bootstrap_servers, self.plan.transaction_timeout_ms, sink.passthrough
        )

    def _attempt(self, records: list[OutRecord], offsets: list[TopicPartition], first: bool) -> None:
        """One transaction: begin, produce, offsets with marker, commit (retriable calls retried in place)."""
        producer = self._producer()
        failures: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failures.append(err)

        producer.begin_transaction()
        self._trace(faults.OPEN)
        send_records(producer, records, on_delivery)
        delay_s = faults.txn_delay_s() if first else 0.0
        if delay_s:
            time.sleep(delay_s)
        metadata = self.consumer.consumer_group_metadata()
        committing = time.perf_counter()
        _retry(
            lambda: _bounded(
                "send_offsets_to_transaction",
                lambda: producer.send_offsets_to_transaction(offsets, metadata, CALL_TIMEOUT_S),
            )
        )
        self._trace(faults.COMMIT)
        _retry(lambda: _bounded("commit_transaction", lambda: producer.commit_transaction(CALL_TIMEOUT_S)))
        self.commit_ms = (time.perf_counter() - committing) * 1000
        self._trace(faults.DONE)

    def _trace(self, step: str) -> None:
        faults.trace(self.plan.query, self.plan.epoch, self.index, step)

    def _recover(self, error: KafkaError | None) -> None:
        """After a failed attempt: abort (abortable errors) or drop the producer (fatal ones, or a failed abort).

        A dropped producer is rebuilt by the next attempt; its `init_transactions` completes the old transaction.
        """
        # A call that timed out leaves the producer in an unknown state (its request may still be in flight):
        # aborting through it can hang the same way, so it is dropped like a fatal one.
        fatal = (
            error is None
            or error.fatal()
            or error.code() in _FATAL_CODES
            or error.code() == KafkaError._TIMED_OUT
        )
        if not fatal:
            try:
                producer = self._producer()
                _retry(
                    lambda: _bounded("abort_transaction", lambda: producer.abort_transaction(CALL_TIMEOUT_S))
                )
                return
            except KafkaException:
                pass
        drop_transactional_producer(self.txn_id)
        self._check_owner()


def write_task(plan: EpochPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` body of one sink task: encode, then commit exactly once; yields one summary row."""
    from pyspark import TaskContext

    context = TaskContext.get()
    index = context.partitionId() if context is not None else 0
    per_sink = [0] * len(plan.outputs)
    records = list(encode_outputs(plan.outputs, _count_rows(batches, per_sink)))
    task = TransactionalTask(plan, index)
    committed = task.commit(records)
    yield pa.RecordBatch.from_pydict(
        {
            "task": pa.array([index], pa.int32()),
            "records": pa.array([len(records) if committed else 0], pa.int64()),
            "skipped": pa.array([0 if committed else 1], pa.int32()),
            "attempts": pa.array([task.attempts], pa.int32()),
            "sink_records": pa.array([per_sink if committed else [0] * len(per_sink)], pa.list_(pa.int64())),
            "commit_ms": pa.array([task.commit_ms if committed else None], pa.float64()),
        }
    )


def _count_rows(batches: Iterator[pa.RecordBatch], per_sink: list[int]) -> Iterator[pa.RecordBatch]:
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
