"""Spark reaches Kafka: the Python DataSource stream reader returns the topic's rows."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from ethereal_kafka.testing import produce
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_stream_reader_returns_every_record_with_kafka_columns(
    spark: SparkSession, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, checkpoint_dir: Path
) -> None:
    topic = topic_factory(partitions=3)
    records = [(b"key-%d" % i, b"value-%d" % i) for i in range(300)]
    for p in range(3):
        produce(kafka_cluster.bootstrap, topic, records[p::3], partition=p)
    name = f"source_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("ethereal-kafka")
        .option("bootstrap.servers", kafka_cluster.bootstrap)
        .option("topics", topic)
        .option("starting.offsets", "earliest")
        .option("max.records.per.epoch", "120")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint_dir))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    rows = spark.sql(f"select * from {name}").collect()
    epochs = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert sorted((r["key"], r["value"]) for r in rows) == sorted(records)
    assert {(r["topic"], r["partition"]) for r in rows} == {(topic, p) for p in range(3)}
    for p in range(3):
        assert sorted(r["offset"] for r in rows if r["partition"] == p) == list(range(100))
    assert all(r["timestamp"] is not None and r["headers"] == [] for r in rows)
    assert len(epochs) >= 3, "max.records.per.epoch=120 must split 300 records over at least 3 epochs"
    assert all(p["numInputRows"] <= 120 for p in epochs)


def test_python_workers_import_the_installed_pyspark_not_the_zip(spark: SparkSession) -> None:
    """Spark names `$SPARK_HOME/python/lib/pyspark.zip` first on its Python processes' path; launched from the
    mirror (`runtime.spark_home`), they import the installed package, whose compiled code is cached."""

    def where(_: object) -> str:
        import pyspark

        return pyspark.__file__ or ""

    files = spark.sparkContext.parallelize(range(2), 2).map(where).collect()
    assert files and all(".zip" not in f and f.endswith("__init__.py") for f in files), files
