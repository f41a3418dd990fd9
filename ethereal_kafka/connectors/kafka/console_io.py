"""Producing and consuming records for people: what `ethereal-kafka produce` and `consume` run.

`produce_records` sends records with an idempotent producer (each record is visible once acknowledged), or, with
`transactional`, in one transaction: every record of the input becomes visible at once, or none does (a bad line,
a failed delivery or an interrupted run aborts it; a read_committed reader never sees any of it). Either way, once
it returns a read_committed reader sees every record it sent.

`consume_records` reads with manual assignment and commits nothing (no consumer group is joined or changed). It
starts at a position per partition (`console.Start`) and ends where the topic ended when it started (for a
read_committed reader: the last stable offset), or follows the topic for new records until stopped. Records of
aborted transactions are not read at read_committed, the default.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ethereal_kafka.connectors.kafka.clients import admin_client, new_consumer, new_producer
from ethereal_kafka.connectors.kafka.console import ConsoleRecord, Start
from ethereal_kafka.connectors.kafka.errors import ProduceError, RecordInputError, TopicError
from ethereal_kafka.connectors.kafka.sink import produce_one
from ethereal_kafka.connectors.kafka.topics import ReadRecord
from ethereal_kafka.errors import KafkaConnectionError

#: The transaction timeout of a transactional `produce`: an interrupted run's records stay invisible (and block
#: read_committed readers of their partitions) at most this long before the broker aborts them.
TRANSACTION_TIMEOUT_MS = 60000

#: How long the cluster may take to acknowledge what was sent, or to answer a metadata or offset request.
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Produced:
    """What `produce_records` sent: `records` acknowledged (all of them), in one transaction or not."""

    records: int
    transactional: bool


def produce_records(
    bootstrap: str,
    topic: str,
    records: Iterable[ConsoleRecord],
    settings: Mapping[str, str] | None = None,
    transactional: bool = False,
) -> Produced:
    """Send `records` to `topic` and wait until every one is acknowledged (see the module docstring).

    `records` is read lazily: an input read from a terminal is sent line by line.

    Raises:
        TopicError: the topic does not exist, or a record names a partition it does not have.
        RecordInputError: `records` raised it for a bad line; the message says what was produced before it
            (nothing, under a transaction).
        ProduceError: a delivery or the commit failed.
        KafkaConnectionError: the cluster did not answer.
    """
    sending = _Sending(bootstrap, topic, settings or {}, transactional)
    try:
        sending.send(records)
    except (RecordInputError, TopicError, KeyboardInterrupt) as exc:
        what = sending.stop()
        if isinstance(exc, RecordInputError):
            raise RecordInputError(f"{exc} ({what})") from exc
        raise
    except KafkaException as exc:
        sending.stop()
        raise ProduceError(f"produce to {topic} at {bootstrap}: {exc.args[0].str()}") from exc
    return sending.finish()


class _Sending:
    """One `produce_records` call: its producer, the records sent, and what the cluster acknowledged."""

    def __init__(self, bootstrap: str, topic: str, settings: Mapping[str, str], transactional: bool) -> None:
        conf: dict[str, Any] = {
            "log_level": "3",
            "enable.idempotence": "true",
            "acks": "all",
            "linger.ms": "5",
            **settings,
            "bootstrap.servers": bootstrap,
        }
        if transactional:
            conf["transactional.id"] = f"ethereal-kafka-produce-{uuid.uuid4().hex[:16]}"
            conf["transaction.timeout.ms"] = str(TRANSACTION_TIMEOUT_MS)
        self.bootstrap, self.topic, self.settings, self.transactional = (
            bootstrap,
            topic,
            settings,
            transactional,
        )
        self.producer = new_producer(conf)
        self.partitions = _partitions(self.producer, topic, bootstrap)
        self.sent = 0
        self.errors: list[str] = []
        self.last: dict[int, int] = {}  # per partition, the highest offset acknowledged

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.errors.append(err.str())
        else:
            self.last[msg.partition()] = max(self.last.get(msg.partition(), -1), msg.offset())

    def send(self, records: Iterable[ConsoleRecord]) -> None:
        """Send every record (in a transaction begun here, when transactional); acknowledgements come later."""
        if self.transactional:
            self.producer.init_transactions(REQUEST_TIMEOUT_S)
            self.producer.begin_transaction()
        for record in records:
            if record.partition is not None and record.partition not in self.partitions:
                raise TopicError(
                    f"topic {self.topic} has no partition {record.partition} (it has {len(self.partitions)})"
                )
            headers = list(record.headers)
            produce_one(
                self.producer,
                self.topic,
                record.key,
                record.value,
                record.partition,
                headers,
                self._delivered,
                record.timestamp_ms,
            )
            self.sent += 1
            self.producer.poll(0)

    def stop(self) -> str:
        """After a bad input: abort the transaction, or deliver what was sent; returns what became of it."""
        if self.transactional:
            _abort(self.producer)
            return f"nothing produced: the transaction of the {self.sent} record(s) before it was aborted"
        self.producer.flush(REQUEST_TIMEOUT_S)
        return f"the {self.sent} record(s) before it were produced"

    def finish(self) -> Produced:
        """Wait for every acknowledgement (and commit the transaction, then wait until readers see it).

        Raises:
            ProduceError: a delivery failed or was not acknowledged in time, or the commit failed.
        """
        if self.transactional:
            done = _commit(self.producer, self.topic, self.sent, self.errors)
            _wait_visible(self.bootstrap, self.settings, self.topic, self.last)
            return done
        remaining = self.producer.flush(REQUEST_TIMEOUT_S)
        if remaining or self.errors:
            first = (
                self.errors[0]
                if self.errors
                else f"{remaining} not acknowledged within {REQUEST_TIMEOUT_S:g} s"
            )
            acknowledged = self.sent - remaining - len(self.errors)
            raise ProduceError(
                f"produce to {self.topic}: {acknowledged} of {self.sent} acknowledged; {first}"
            )
        return Produced(self.sent, False)


def _partitions(client: Any, topic: str, bootstrap: str) -> set[int]:
    try:
        found = client.list_topics(topic, timeout=REQUEST_TIMEOUT_S).topics.get(topic)
    except KafkaException as exc:
        raise KafkaConnectionError(f"metadata of {topic}: Kafka at {bootstrap} did not answer") from exc
    if found is None or found.error is not None:
        raise TopicError(
            f"topic {topic} does not exist at {bootstrap} (create it: ethereal-kafka topics create {topic})"
        )
    return set(found.partitions)


def _commit(producer: Any, topic: str, sent: int, errors: list[str]) -> Produced:
    remaining = producer.flush(REQUEST_TIMEOUT_S)
    if remaining or errors:
        _abort(producer)
        first = errors[0] if errors else f"{remaining} not acknowledged within {REQUEST_TIMEOUT_S:g} s"
        raise ProduceError(
            f"produce to {topic}: transaction of {sent} record(s) aborted, none visible; {first}"
        )
    try:
        producer.commit_transaction(REQUEST_TIMEOUT_S)
    except KafkaException as exc:
        _abort(producer)
        raise ProduceError(
            f"produce to {topic}: the transaction of {sent} record(s) did not commit: {exc}"
        ) from exc
    return Produced(sent, True)


def _wait_visible(bootstrap: str, settings: Mapping[str, str], topic: str, last: Mapping[int, int]) -> None:
    """Wait until a read_committed reader can read up to every acknowledged offset: the broker writes a committed
    transaction's markers after the commit returns, so a reader started at once could still stop short of them
    (its last stable offset). Gives up quietly after `REQUEST_TIMEOUT_S`: the records are committed either way."""
    wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in last}
    admin = admin_client(bootstrap, settings)
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while wanted and time.monotonic() < deadline:
        try:
            futures = admin.list_offsets(
                wanted, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10
            )
            stable = {tp.partition: future.result().offset for tp, future in futures.items()}
        except KafkaException:
            return
        if all(stable.get(p, -1) > offset for p, offset in last.items()):
            return
        time.sleep(0.02)


def _abort(producer: Any) -> None:
    with contextlib.suppress(KafkaException):  # else the broker aborts it after TRANSACTION_TIMEOUT_MS
        producer.abort_transaction(REQUEST_TIMEOUT_S)


def consume_records(
    bootstrap: str,
    topic: str,
    start: Start,
    settings: Mapping[str, str] | None = None,
    partition: int | None = None,
    isolation_level: str = "read_committed",
    follow: bool = False,
    idle_timeout_s: float | None = None,
) -> Generator[ReadRecord, None, None]:
    """Records of `topic` from `start`, partition after partition as they arrive (see the module docstring).

    Args:
        partition: Read only this partition.
        follow: Keep reading new records until the caller stops iterating (or `idle_timeout_s` passes without
            one); else end at the end offsets found when reading began.
        idle_timeout_s: End when no record came for this long (None: never, when following; 30 s otherwise, a
            bound for a cluster that stops answering).

    Raises:
        TopicError: the topic or the partition does not exist.
        KafkaConnectionError: the cluster did not answer.
    """
    consumer = _reader(bootstrap, settings, isolation_level)
    try:
        parts = sorted(_partitions(consumer, topic, bootstrap))
        if partition is not None:
            if partition not in parts:
                raise TopicError(f"topic {topic} has no partition {partition} (it has {len(parts)})")
            parts = [partition]
        ends = {p: _watermarks(consumer, topic, p, bootstrap)[1] for p in parts}
        positions = _start_offsets(consumer, topic, parts, start, ends, bootstrap)
        consumer.assign([TopicPartition(topic, p, positions[p]) for p in parts])
        try:
            yield from _read(consumer, ends, positions, follow, idle_timeout_s)
        except KafkaException as exc:
            raise _consume_error(topic, bootstrap, exc) from exc
    finally:
        consumer.close()


def _consume_error(topic: str, bootstrap: str, exc: KafkaException) -> KafkaConnectionError:
    """A failed read of `topic`, as one line."""
    error = exc.args[0]
    return KafkaConnectionError(
        f"consume {topic} at {bootstrap}: {error.str() if hasattr(error, 'str') else error}"
    )


def _reader(
    bootstrap: str, settings: Mapping[str, str] | None, isolation_level: str, reset: str = "earliest"
) -> Consumer:
    """A consumer for manual assignment that joins no group and commits nothing; `reset` is what it does at an
    offset the partition no longer holds (`error`: fail the read)."""
    return new_consumer(
        {
            "log_level": "3",
            **(settings or {}),
            "bootstrap.servers": bootstrap,
            "group.id": f"ethereal-kafka-console-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            "auto.offset.reset": reset,
            "isolation.level": isolation_level,
        }
    )


def read_range(
    bootstrap: str,
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    settings: Mapping[str, str] | None = None,
) -> list[ReadRecord]:
    """The committed records of `topic` in `[start, end)` of each partition `{partition: (start, end)}`, in partition
    then offset order (read_committed: records of aborted transactions are skipped, and a partition is done once the
    reader's position reaches `end`, past aborted records and transaction markers alike).

    Raises:
        KafkaConnectionError: a partition made no progress for `REQUEST_TIMEOUT_S` before reaching its end (the
            cluster stopped answering, or a transaction below `end` is still open), naming it; or a `start` the
            partition no longer holds (deleted by retention).
    """
    wanted = {p: (start, end) for p, (start, end) in ranges.items() if end > start}
    if not wanted:
        return []
    # A start the partition no longer holds (retention deleted it) fails the read: never a shorter range.
    consumer = _reader(bootstrap, settings, "read_committed", reset="error")
    found: dict[int, list[ReadRecord]] = {p: [] for p in wanted}
    try:
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in wanted.items()])
        pending = set(wanted)
        last = time.monotonic()
        while pending:
            for message in consumer.consume(num_messages=500, timeout=0.2):
                error = message.error()
                p = message.partition() or 0
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                if error is None and p in pending and (message.offset() or 0) < wanted[p][1]:
                    found[p].append(_record(message))
                    last = time.monotonic()
            for tp in consumer.position([TopicPartition(topic, p) for p in sorted(pending)]):
                if tp.offset >= wanted[tp.partition][1]:
                    pending.discard(tp.partition)
                    last = time.monotonic()
            if pending and time.monotonic() - last > REQUEST_TIMEOUT_S:
                stuck = ", ".join(f"{topic}[{p}] before offset {wanted[p][1]}" for p in sorted(pending))
                raise KafkaConnectionError(f"read of {stuck} at {bootstrap} made no progress")
    except KafkaException as exc:
        raise _consume_error(topic, bootstrap, exc) from exc
    finally:
        consumer.close()
    return [record for p in sorted(found) for record in found[p]]


def _read(
    consumer: Consumer,
    ends: Mapping[int, int],
    positions: Mapping[int, int],
    follow: bool,
    idle_timeout_s: float | None,
) -> Iterator[ReadRecord]:
    """The assigned records until every partition reached its end (unless `follow`) or none came for a while."""
    idle = idle_timeout_s if idle_timeout_s is not None or follow else REQUEST_TIMEOUT_S
    done = set() if follow else {p for p, at in positions.items() if at >= ends[p]}
    last = time.monotonic()
    while follow or len(done) < len(ends):
        if idle is not None and time.monotonic() - last > idle:
            return
        for message in consumer.consume(num_messages=500, timeout=0.2):
            error = message.error()
            p = message.partition() or 0
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if not follow and (message.offset() or 0) >= ends[p]:
                        done.add(p)
                    continue
                raise KafkaException(error)
            offset = message.offset() or 0
            if not follow and (p in done or offset >= ends[p]):
                done.add(p)
                continue  # written after reading began: not part of what was there
            last = time.monotonic()
            yield _record(message)
            if not follow and offset + 1 >= ends[p]:
                done.add(p)


def _record(message: Any) -> ReadRecord:
    raw = message.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return ReadRecord(
        str(message.topic()),
        message.partition() or 0,
        message.offset() or 0,
        message.key(),
        message.value(),
        message.timestamp()[1],
        tuple((str(k), v if isinstance(v, bytes | None) else str(v).encode()) for k, v in pairs),
    )


def _watermarks(consumer: Consumer, topic: str, partition: int, bootstrap: str) -> tuple[int, int]:
    """(earliest, end) of one partition; `end` is the last stable offset for a read_committed consumer."""
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=REQUEST_TIMEOUT_S, cached=False
        )
    except KafkaException as exc:
        raise KafkaConnectionError(
            f"offsets of {topic}[{partition}]: Kafka at {bootstrap} did not answer"
        ) from exc
    return int(low), int(high)


def _start_offsets(
    consumer: Consumer, topic: str, parts: list[int], start: Start, ends: Mapping[int, int], bootstrap: str
) -> dict[int, int]:
    """Per partition, the offset reading begins at (`start` resolved against the partition's retained range)."""
    if start.kind == "earliest":
        return {p: _watermarks(consumer, topic, p, bootstrap)[0] for p in parts}
    if start.kind == "latest":
        return dict(ends)
    if start.kind == "offset":
        return {p: min(start.value, ends[p]) for p in parts}
    if start.kind == "back":
        return {p: max(_watermarks(consumer, topic, p, bootstrap)[0], ends[p] - start.value) for p in parts}
    wanted = [TopicPartition(topic, p, start.value) for p in parts]
    try:
        found = consumer.offsets_for_times(wanted, timeout=REQUEST_TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaConnectionError(
            f"offsets of {topic} at a time: Kafka at {bootstrap} did not answer"
        ) from exc
    return {tp.partition: ends[tp.partition] if tp.offset < 0 else tp.offset for tp in found}
