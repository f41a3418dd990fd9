"""Proof the broker is real: transactions and transactional offsets behave as Kafka specifies."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from ethereal_kafka.testing import read_all
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory


def _txn_producer(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"test-{uuid.uuid4().hex}"})
    producer.init_transactions(60)
    return producer


def test_aborted_batch_is_invisible_to_read_committed(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory
) -> None:
    topic = topic_factory(partitions=2)
    producer = _txn_producer(kafka_cluster.bootstrap)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, key=b"k%d" % i, value=b"aborted-%d" % i, partition=i % 2)
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"k%d" % i, value=b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction()

    committed = read_all(kafka_cluster.bootstrap, topic, "read_committed")
    uncommitted = read_all(kafka_cluster.bootstrap, topic, "read_uncommitted")
    assert sorted(r.value for r in committed) == [b"committed-0", b"committed-1", b"committed-2"]
    assert sorted(r.value for r in uncommitted) == sorted(
        [b"aborted-%d" % i for i in range(5)] + [b"committed-%d" % i for i in range(3)]
    )


def test_open_transaction_blocks_read_committed_until_commit(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory
) -> None:
    topic = topic_factory()
    producer = _txn_producer(kafka_cluster.bootstrap)
    producer.begin_transaction()
    producer.produce(topic, value=b"pending")
    producer.flush()
    assert read_all(kafka_cluster.bootstrap, topic, "read_committed", timeout_s=3) == []
    assert [r.value for r in read_all(kafka_cluster.bootstrap, topic, "read_uncommitted")] == [b"pending"]
    producer.commit_transaction()
    assert [r.value for r in read_all(kafka_cluster.bootstrap, topic, "read_committed")] == [b"pending"]


def test_offsets_in_a_transaction_appear_with_metadata_only_on_commit(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory
) -> None:
    source = topic_factory(prefix="offsets-source")
    sink = topic_factory(prefix="offsets-sink")
    group = f"group-{uuid.uuid4().hex[:8]}"
    bootstrap = kafka_cluster.bootstrap
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    # A read_committed consumer asks for stable offsets (KIP-447): while a transaction holds pending offsets for
    # the group the broker answers UNSTABLE_OFFSET_COMMIT and the client waits. A read_uncommitted one gets the last
    # stable value at once.
    stable = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    )
    observer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted"}
    )
    try:
        producer = _txn_producer(bootstrap)
        producer.begin_transaction()
        producer.produce(sink, value=b"out")
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 42, "app:ckpt:7")], member.consumer_group_metadata(), 30
        )
        producer.flush()
        before = observer.committed([TopicPartition(source, 0)], timeout=10)[0]
        assert before.offset < 0, "offsets sent in an open transaction must not be visible"
        with pytest.raises(KafkaException, match="Timed out"):
            stable.committed([TopicPartition(source, 0)], timeout=3)
        producer.commit_transaction(30)
        # The stable read waits for the commit markers, so it sees the offset right after commit returns.
        after = stable.committed([TopicPartition(source, 0)], timeout=10)[0]
        assert (after.offset, after.metadata) == (42, "app:ckpt:7")
        after = observer.committed([TopicPartition(source, 0)], timeout=10)[0]
        assert (after.offset, after.metadata) == (42, "app:ckpt:7")
    finally:
        member.close()
        observer.close()
        stable.close()
