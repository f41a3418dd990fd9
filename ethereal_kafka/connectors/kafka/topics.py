"""Topic tools over plain confluent-kafka clients: create topics, add partitions, produce records, read them back
(as a read_committed consumer sees them, or everything). Used by the test kit, the benchmarks and the demo.

They use plain confluent-kafka clients with bounded waits; every read states its isolation level.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from ethereal_kafka.connectors.kafka.clients import admin_client, cluster_metadata, new_consumer, new_producer
from ethereal_kafka.connectors.kafka.sink import produce_one
from ethereal_kafka.errors import KafkaConnectionError

Record = tuple[bytes | None, bytes | None]


@dataclass(frozen=True)
class ReadRecord:
    """A record as a test sees it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...]

    def json(self) -> Any:
        """The value decoded as JSON (None for a tombstone)."""
        return None if self.value is None else json.loads(self.value)


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    replication_factor: int = 1,
) -> str:
    """Create a topic and wait until its metadata shows every partition; returns the name.

    `replication_factor` -1 takes the cluster's `default.replication.factor` (a `LocalCluster` sets it to 3).
    """
    admin = admin_client(bootstrap)
    futures = admin.create_topics([NewTopic(name, partitions, replication_factor, config=dict(config or {}))])
    futures[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = cluster_metadata(admin, bootstrap).topics.get(name)
        if topic is not None and len(topic.partitions) == partitions and topic.error is None:
            return name
        time.sleep(0.1)
    raise KafkaConnectionError(f"topic {name} did not appear within 30 s")


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    """Grow `topic` to `total` partitions and wait until the metadata shows them."""
    admin = admin_client(bootstrap)  # must outlive the future: a destroyed client fails its requests
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = cluster_metadata(admin, bootstrap).topics.get(topic)
        if found is not None and len(found.partitions) == total:
            return
        time.sleep(0.1)
    raise KafkaConnectionError(f"{topic} did not reach {total} partitions within 30 s")


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    partition: int | None = None,
    timestamps_ms: Iterable[int] | None = None,
) -> int:
    """Produce `(key, value)` records with an idempotent producer and wait for every ack; returns the count.

    librdkafka's own lines (`GETPID ... Coordinator load in progress: retrying` on a broker that just started) go to
    the `ethereal_kafka.librdkafka` logger, as every framework client's do (`clients.librdkafka_logger`), not to
    stderr; a failure to deliver is this function's error.
    """
    producer = new_producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err.str())

    stamps = iter(timestamps_ms) if timestamps_ms is not None else None
    count = 0
    for key, value in records:
        stamp = next(stamps) if stamps is not None else None
        produce_one(producer, topic, key, value, partition, None, on_delivery, stamp)
        count += 1
    remaining = producer.flush(60)
    if remaining or errors:
        raise KafkaConnectionError(f"produce to {topic}: {remaining} unacknowledged, errors {errors[:3]}")
    return count


def read_all(
    bootstrap: str,
    topic: str,
    isolation_level: str = "read_committed",
    timeout_s: float = 30.0,
    expected: int | None = None,
) -> list[ReadRecord]:
    """Read a topic from the beginning to its end offsets (or until `expected` records), in partition order.

    Ends when every partition reached the end offset measured at the start (for read_committed: the last stable
    offset), or when `expected` records arrived, or after `timeout_s` (then returns what it has).
    """
    consumer = new_consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ethereal-kafka-test-reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation_level,
            "log_level": 3,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        parts = sorted(metadata.topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        done = {p for p, end in ends.items() if end == 0} if expected is None else set()
        out: list[ReadRecord] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if expected is None and len(done) == len(parts):
                break
            if expected is not None and len(out) >= expected:
                break
            for m in consumer.consume(num_messages=1000, timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and (m.offset() or 0) >= ends.get(
                        m.partition() or 0, 0
                    ):
                        done.add(m.partition() or 0)
                    continue
                raw = m.headers()
                pairs = raw.items() if isinstance(raw, dict) else (raw or [])
                partition, offset = m.partition() or 0, m.offset() or 0
                out.append(
                    ReadRecord(
                        str(m.topic()),
                        partition,
                        offset,
                        m.key(),
                        m.value(),
                        m.timestamp()[1],
                        tuple(
                            (str(k), v if isinstance(v, bytes | None) else str(v).encode()) for k, v in pairs
                        ),
                    )
                )
                if offset + 1 >= ends.get(partition, 0):
                    done.add(partition)
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def read_committed(
    bootstrap: str, topic: str, timeout_s: float = 30.0, expected: int | None = None
) -> list[ReadRecord]:
    """`read_all` with `isolation.level=read_committed`: what exactly-once output is judged by."""
    return read_all(bootstrap, topic, "read_committed", timeout_s, expected)
