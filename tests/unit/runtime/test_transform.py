"""`transform.sql`: the SQL runs against views named after the sources and feeds the only sink."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.config.job import JobConfig, LoadedJob
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.runtime.transform import dataframe_pipeline, sql_pipeline

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BASE = {"app.id": "a", "sources": "s.properties", "sinks": "k.properties", "checkpoint.location": "/tmp/c"}


def loaded(sql: str, sinks: tuple[str, ...] = ("out",)) -> LoadedJob:
    job = JobConfig.from_properties({**BASE, "transform.sql": sql})
    configs = {
        name: KafkaSinkConfig.from_properties(
            {"connector.class": "kafka-sink", "name": name, "bootstrap.servers": "127.0.0.1:9", "topic": name}
        )
        for name in sinks
    }
    return LoadedJob(Path("job.properties"), job, {}, configs)


def test_the_query_runs_against_views_named_after_the_sources(spark: SparkSession) -> None:
    orders = spark.createDataFrame([("c1", 10.0), ("c2", 70.0)], "customer string, amount double")
    refunds = spark.createDataFrame([("c2",)], "customer string")
    job = loaded(
        "SELECT o.customer AS key, CAST(o.amount AS string) AS value FROM orders o "
        "LEFT ANTI JOIN `refund-events` r ON o.customer = r.customer WHERE o.amount > 5"
    )
    frame = dataframe_pipeline(spark, job)({"orders": orders, "refund-events": refunds})
    assert [tuple(r) for r in frame.collect()] == [("c1", "10.0")]


def test_a_query_that_does_not_resolve_is_a_config_error(spark: SparkSession) -> None:
    orders = spark.createDataFrame([("c1", 10.0)], "customer string, amount double")
    transform = sql_pipeline(spark, loaded("SELECT customer AS key, price AS value FROM orders"))
    with pytest.raises(ConfigError, match=r"transform.sql does not run against views orders: .*price"):
        transform({"orders": orders})


def test_a_sql_transform_feeds_exactly_one_sink(spark: SparkSession) -> None:
    with pytest.raises(ConfigError, match="feeds exactly one sink, but the job has 2"):
        sql_pipeline(spark, loaded("SELECT 1", sinks=("a", "b")))
