"""The range reader's cached consumer on the real broker: consecutive epochs' ranges start without a fetch stall.

Two stalls, each measured against librdkafka's default that caused it:

A sink task reads its epoch's range with this process's cached consumer (`range_reader.read_messages`). Reading one
range lets librdkafka prefetch far past its end; once its fetch queue is over `queued.min.messages` it postpones the
partition's next fetch by `fetch.queue.backoff.ms` (1000 ms by default), and that postponement survives the
unassign / assign of the next epoch's range. With the default, the next range's first records came ~1 s late, in
about every other epoch of a draining job (a fixed cost per epoch: bench/adaptive.py's trace, docs/operations.md).
A range that ends at the partition's end leaves the prefetcher long-polling there (`fetch.wait.max.ms`, 500 ms by
default), and the next range's first fetch to that broker waits for the held one.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from ethereal_kafka.connectors.kafka.clients import close_cached_clients, consumer_config
from ethereal_kafka.connectors.kafka.range_reader import read_messages
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory

pytestmark = pytest.mark.timeout(120)

#: More than librdkafka's `queued.min.messages` (100,000) past the ranges read: the prefetch queue fills up.
PER_PARTITION = 150_000
RANGE = 25_000


def _slowest_first_chunk_s(bootstrap: str, topic: str, passthrough: dict[str, str]) -> float:
    """Read six consecutive `RANGE`-offset ranges of partitions 0 and 1 in turn with one cached consumer, as a Python
    worker's sink tasks read their epochs' ranges (the task of one epoch reads partition 0, of the next partition
    1); returns the longest wait for a range's first chunk."""
    conf = consumer_config(bootstrap, f"range-reader-{uuid.uuid4().hex[:8]}", "read_committed", passthrough)
    waits = []
    try:
        for i in range(6):
            partition, start = i % 2, i // 2 * RANGE
            began = time.monotonic()
            chunks = read_messages(conf, topic, partition, start, start + RANGE, 10_000, 30_000)
            first = next(chunks)
            waits.append(time.monotonic() - began)
            assert first[0].offset() == start
            assert sum(len(chunk) for chunk in chunks) + len(first) == RANGE
            time.sleep(0.3)  # the rest of the epoch and the planning of the next
        return max(waits)
    finally:
        close_cached_clients()


def test_the_next_epochs_range_starts_without_waiting_out_a_fetch_backoff(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory
) -> None:
    bs = kafka_cluster.bootstrap
    topic = topic_factory(partitions=2)
    # Large compressed batches, as a backlog produced by a busy client: fetches that fill the prefetch queue fast.
    producer = Producer(
        {"bootstrap.servers": bs, "linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4"}
    )
    for i in range(PER_PARTITION):
        for partition in (0, 1):
            value = b'{"id":%d,"key":"k%d","amount":%d,"ts":1800000000000}' % (i, partition, i % 97)
            while True:
                try:
                    producer.produce(topic, value, b"k%d" % partition, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(60) == 0

    # The better of two passes: a loaded machine (the suite runs three workers on two cores) only adds to a wait,
    # and a stall the configuration failed to remove would show in both.
    quick = min(_slowest_first_chunk_s(bs, topic, {}) for _ in range(2))
    # The same reads with librdkafka's default backoff: the stall the reader's configuration removes.
    stalled = _slowest_first_chunk_s(bs, topic, {"fetch.queue.backoff.ms": "1000"})

    print(
        f"slowest first chunk of a range: {quick * 1000:.0f} ms (librdkafka's default: {stalled * 1000:.0f} ms)"
    )
    assert stalled > 0.7, (
        f"the default backoff did not stall a range ({stalled:.2f}s): the test shows nothing"
    )
    assert quick < 0.5, f"a range's first records came after {quick:.2f}s"


def test_a_range_after_one_that_ended_at_the_partitions_end_starts_without_waiting_out_a_long_poll(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory
) -> None:
    bs = kafka_cluster.bootstrap
    topic = topic_factory(partitions=2)
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(1000):
        for partition in (0, 1):
            producer.produce(topic, b'{"id":%d}' % i, b"k%d" % partition, partition=partition)
    assert producer.flush(30) == 0

    def slowest_first_chunk_s(passthrough: dict[str, str]) -> float:
        """Read both partitions' whole ranges in turn, as a live job's epochs do (each range ends at the
        partition's end), 0.05 s apart; the longest wait for a range's first chunk."""
        conf = consumer_config(bs, f"range-reader-{uuid.uuid4().hex[:8]}", "read_committed", passthrough)
        waits = []
        try:
            for i in range(8):
                began = time.monotonic()
                chunks = read_messages(conf, topic, i % 2, 0, 1000, 10_000, 30_000)
                first = next(chunks)
                waits.append(time.monotonic() - began)
                assert sum(len(chunk) for chunk in chunks) + len(first) == 1000
                time.sleep(0.05)
            return max(waits[1:])  # the first read also connects
        finally:
            close_cached_clients()

    quick = slowest_first_chunk_s({})
    # The same reads with librdkafka's default long poll: the stall the reader's configuration removes.
    stalled = slowest_first_chunk_s({"fetch.wait.max.ms": "500"})
    print(f"slowest first chunk: {quick * 1000:.0f} ms (librdkafka's default: {stalled * 1000:.0f} ms)")
    assert stalled > 0.3, (
        f"the default long poll did not stall a range ({stalled:.2f}s): the test shows nothing"
    )
    assert quick < 0.25, f"a range's first records came after {quick:.2f}s"
