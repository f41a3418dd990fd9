"""The Kafka source on Spark: start positions, topic patterns, new partitions, admission control."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, TopicPartition

from ethereal_kafka.connectors.kafka.topics import add_partitions, produce
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory
from ethereal_kafka.testing.spark_io import read_source_available

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Record timestamps must be recent: the broker deletes records older than its retention (7 days by default).
BASE_TS = (int(time.time()) - 3600) * 1000


def _fill(bootstrap: str, topic: str, partitions: int, per_partition: int, base_ts: int = BASE_TS) -> None:
    for p in range(partitions):
        records = [(f"k{p}-{i}".encode(), f"v{p}-{i}".encode()) for i in range(per_partition)]
        produce(
            bootstrap,
            topic,
            records,
            partition=p,
            timestamps_ms=[base_ts + i * 1000 for i in range(per_partition)],
        )


def _values(rows: list) -> list[bytes]:  # type: ignore[type-arg]
    return sorted(bytes(r["value"]) for r in rows)


@pytest.fixture
def filled(kafka_cluster: KafkaCluster, topic_factory: TopicFactory) -> str:
    topic = topic_factory(partitions=2)
    _fill(kafka_cluster.bootstrap, topic, 2, 20)
    return topic


def _options(bootstrap: str, topic: str, **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "topics": topic, **extra}


def test_earliest_reads_everything(
    spark: SparkSession, kafka_cluster: KafkaCluster, filled: str, tmp_path: Path
) -> None:
    rows, _ = read_source_available(
        spark, _options(kafka_cluster.bootstrap, filled, **{"starting.offsets": "earliest"}), tmp_path
    )
    assert _values(rows) == sorted(f"v{p}-{i}".encode() for p in range(2) for i in range(20))


def test_latest_reads_only_what_comes_after_start(
    spark: SparkSession, kafka_cluster: KafkaCluster, filled: str, tmp_path: Path
) -> None:
    opts = _options(kafka_cluster.bootstrap, filled, **{"starting.offsets": "latest"})
    rows, _ = read_source_available(spark, opts, tmp_path / "ckpt")
    assert rows == []
    produce(kafka_cluster.bootstrap, filled, [(b"k", b"after")], partition=1)
    rows, _ = read_source_available(
        spark, opts, tmp_path / "ckpt"
    )  # same checkpoint: resumes where it stopped
    assert _values(rows) == [b"after"]


def test_timestamp_starts_at_the_first_record_at_or_after_it(
    spark: SparkSession, kafka_cluster: KafkaCluster, filled: str, tmp_path: Path
) -> None:
    ts = BASE_TS + 15 * 1000
    rows, _ = read_source_available(
        spark, _options(kafka_cluster.bootstrap, filled, **{"starting.offsets": f"timestamp:{ts}"}), tmp_path
    )
    assert _values(rows) == sorted(f"v{p}-{i}".encode() for p in range(2) for i in range(15, 20))


def test_explicit_offsets_per_partition(
    spark: SparkSession, kafka_cluster: KafkaCluster, filled: str, tmp_path: Path
) -> None:
    spec = f"{filled}:0:18,{filled}:1:5"
    rows, _ = read_source_available(
        spark, _options(kafka_cluster.bootstrap, filled, **{"starting.offsets": spec}), tmp_path
    )
    want = [f"v0-{i}".encode() for i in (18, 19)] + [f"v1-{i}".encode() for i in range(5, 20)]
    assert _values(rows) == sorted(want)


def test_group_offsets_with_reset_for_partitions_without_one(
    spark: SparkSession, kafka_cluster: KafkaCluster, filled: str, tmp_path: Path
) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    committer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap, "group.id": group})
    committer.commit(offsets=[TopicPartition(filled, 0, 12)], asynchronous=False)
    committer.close()
    opts = _options(kafka_cluster.bootstrap, filled, **{"group.id": group, "group.offsets.reset": "latest"})
    rows, _ = read_source_available(spark, opts, tmp_path / "ckpt")
    assert _values(rows) == sorted(f"v0-{i}".encode() for i in range(12, 20)), (
        "partition 1 has no offset: latest"
    )


def test_unknown_partition_in_explicit_offsets_is_rejected(kafka_cluster: KafkaCluster, filled: str) -> None:
    from ethereal_kafka.config import KafkaSourceConfig
    from ethereal_kafka.connectors.kafka.positions import PositionResolver

    cfg = KafkaSourceConfig.from_properties(
        _options(kafka_cluster.bootstrap, filled, **{"starting.offsets": f"{filled}:7:0"})
    )
    with pytest.raises(ConfigError, match=f"{filled}:7"):
        PositionResolver(cfg).initial()


def test_topic_pattern_reads_every_matching_topic(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    prefix = f"pattern-{uuid.uuid4().hex[:6]}"
    a = topic_factory(prefix=f"{prefix}-a")
    b = topic_factory(prefix=f"{prefix}-b", partitions=2)
    other = topic_factory(prefix="unrelated")
    for t in (a, b, other):
        produce(kafka_cluster.bootstrap, t, [(None, t.encode())])
    opts = {
        "bootstrap.servers": kafka_cluster.bootstrap,
        "topic.pattern": f"{prefix}-.*",
        "starting.offsets": "earliest",
    }
    rows, _ = read_source_available(spark, opts, tmp_path / "ckpt")
    assert _values(rows) == sorted([a.encode(), b.encode()])


def test_admission_control_bounds_every_epoch(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=3)
    _fill(kafka_cluster.bootstrap, topic, 3, 400)
    opts = _options(
        kafka_cluster.bootstrap, topic, **{"starting.offsets": "earliest", "max.records.per.epoch": "250"}
    )
    rows, progress = read_source_available(spark, opts, tmp_path / "ckpt")
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert len(rows) == 1200
    assert max(sizes) <= 250 and len(sizes) >= 5
    assert sum(sizes) == 1200


def test_partitions_added_while_running_are_read(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    produce(kafka_cluster.bootstrap, topic, [(None, b"before")])
    name = f"grow_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("ethereal-kafka")
        .options(**_options(kafka_cluster.bootstrap, topic, **{"starting.offsets": "earliest"}))
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        _wait_rows(spark, name, 1)
        add_partitions(kafka_cluster.bootstrap, topic, 3)
        produce(kafka_cluster.bootstrap, topic, [(None, b"new-1")], partition=1)
        produce(kafka_cluster.bootstrap, topic, [(None, b"new-2")], partition=2)
        rows = _wait_rows(spark, name, 3)
    finally:
        query.stop()
    assert _values(rows) == [b"before", b"new-1", b"new-2"]
    assert {r["partition"] for r in rows} == {0, 1, 2}


def _wait_rows(spark: SparkSession, table: str, count: int, timeout_s: float = 90.0) -> list:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout_s
    rows: list = []  # type: ignore[type-arg]
    while time.monotonic() < deadline:
        rows = spark.sql(f"select * from {table}").collect()
        if len(rows) >= count:
            return rows
        time.sleep(0.5)
    raise AssertionError(f"only {len(rows)} of {count} rows arrived in {timeout_s} s")
