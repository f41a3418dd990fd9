"""Operator chaining (`plan.chaining`): which queries chain, and that the chained function gives the rows Spark's plan
gives (here over static DataFrames; `tests/integration/test_api_stateless.py` compares the two on the broker)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.config.job import JobConfig
from ethereal_kafka.plan.chaining import ChainedPipeline, chain_of, map_step, sink_step, source_step
from ethereal_kafka.plan.compiler import chains
from ethereal_kafka.plan.outputs import record_columns
from ethereal_kafka.plan.pyfuncs import PyStage
from ethereal_kafka.plan.query import Layout
from ethereal_kafka.plan.schema import OFFSET, PART, RECORD_TS, arrow_of, arrow_struct

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

JOB = {"app.id": "a", "sources": "s", "sinks": "k", "pipeline": "m:f", "checkpoint.location": "/tmp/x"}


def _sink(**settings: str) -> KafkaSinkConfig:
    return KafkaSinkConfig.from_properties(
        {"name": "out", "bootstrap.servers": "127.0.0.1:1", "topic": "out", **settings}
    )


def test_only_exactly_once_partition_preserving_queries_with_chaining_on_chain() -> None:
    on = JobConfig.from_properties(JOB)
    assert chains(on, Layout.PARTITION_PRESERVING)
    assert not chains(on, Layout.SHUFFLING)
    assert not chains(None, Layout.PARTITION_PRESERVING)
    off = JobConfig.from_properties({**JOB, "pipeline.operator.chaining": "false"})
    assert not chains(off, Layout.PARTITION_PRESERVING)
    at_least_once = JobConfig.from_properties({**JOB, "delivery.guarantee": "at-least-once"})
    assert not chains(at_least_once, Layout.PARTITION_PRESERVING)


def _source(spark: SparkSession) -> tuple[DataFrame, DataFrame, list[tuple[str, str]]]:
    """A static stand-in for the source's read (its Kafka columns and decoded fields) and the source compiler's
    projection of it."""
    from pyspark.sql import functions as F

    read = spark.createDataFrame(
        [("a b", 1, 0, 10, 1_700_000_000_000), ("ccc", 2, 1, 11, 1_700_000_000_500)],
        "text string, seq long, partition int, offset long, ts_ms long",
    ).select("text", "seq", "partition", "offset", F.timestamp_millis("ts_ms").alias("timestamp"))
    columns = [
        ("text", "text"),
        ("seq", "seq"),
        ("timestamp", "timestamp"),
        ("partition", PART),
        ("offset", OFFSET),
        ("timestamp", RECORD_TS),
    ]
    frame = read.select(*[F.col(a).alias(b) for a, b in columns])
    return read, frame, columns


def _words(element: dict[str, Any]) -> list[dict[str, Any]]:
    at = element["timestamp"].isoformat()
    return [{"word": w, "seq": element["seq"], "at": at} for w in element["text"].split()]


def test_the_chained_function_gives_the_rows_of_the_spark_plan(spark: SparkSession) -> None:
    """source projection -> flat_map (Python) -> sink binding (json value, `word` as key): the chained function
    over the read's Arrow batches equals Spark's execution of the same plan, row for row and type for type."""
    read, frame, columns = _source(spark)
    fields = ("text", "seq", "timestamp")
    hidden = (PART, OFFSET, RECORD_TS)
    arrow = arrow_of(frame.schema)
    stage = PyStage(
        "flat_map#1",
        "flat_map",
        _words,
        fields,
        arrow_struct("word string, seq long, at string", "flat_map#1"),
        hidden,
        tuple(arrow.field(h).type for h in hidden),
    )
    from ethereal_kafka.plan.schema import spark_struct

    mapped = frame.mapInArrow(stage, spark_struct(stage.output_schema()))
    config = _sink(**{"value.format": "json"})
    out_fields = ("word", "seq", "at")
    key, value = record_columns(mapped, out_fields, config, "sink")
    from pyspark.sql import functions as F

    bound = mapped.select(key.alias("__k0"), F.col(PART), F.col(OFFSET), value.alias("__v0"))
    sink = sink_step(mapped, out_fields, config, bound)
    assert sink is not None and sink.key is None and sink.struct
    chain = chain_of((source_step(frame, columns), map_step(stage, frame)), sink)
    assert isinstance(chain, ChainedPipeline) and chain.labels == ("flat_map#1",)

    batches = read.toArrow().to_batches()
    got = pa.Table.from_batches(list(chain(batches)))
    want = bound.toArrow()
    assert got.schema.names == want.schema.names
    assert got.cast(want.schema).to_pylist() == want.to_pylist()


def test_a_sink_binding_spark_would_cast_is_not_chained(spark: SparkSession) -> None:
    frame = spark.createDataFrame([], "n long, name string, key long")
    bound = frame.select("name")
    # a string value from a long (Spark's text form of numbers is its own), a string key from a long
    assert sink_step(frame, ("n",), _sink(**{"value.format": "string"}), bound) is None
    assert (
        sink_step(frame, ("name", "key"), _sink(**{"value.format": "json", "key.format": "string"}), bound)
        is None
    )
    # already the sink's types: chained
    both = frame.select(frame["name"].alias("__k0"), frame["name"].alias("__v0"))
    step = sink_step(frame, ("name",), _sink(**{"value.format": "string"}), both)
    assert step is not None and not step.struct and step.value == ("name",)


def test_a_chain_must_start_at_its_source_and_end_at_a_sink(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    _, frame, columns = _source(spark)
    config = _sink(**{"value.format": "string"})
    bound = frame.select(F.lit(None).cast("binary").alias("__k0"), PART, OFFSET, F.col("text").alias("__v0"))
    sink = sink_step(frame, ("text",), config, bound)
    assert sink is not None
    source = source_step(frame, columns)
    assert isinstance(chain_of((source,), sink), ChainedPipeline)
    assert chain_of(None, sink) is None  # another operator ended the chain
    assert chain_of((), sink) is None
    assert chain_of((source,), None) is None  # a binding Spark would cast
    stage = PyStage("map#1", "map", dict, ("text",), arrow_struct("text string", "m"), (), ())
    assert chain_of((map_step(stage, frame.select(F.col("text"))),), sink) is None  # no source first


def test_key_by_fields_sets_the_key_as_spark_does(spark: SparkSession) -> None:
    """`key_by` on one field, on two (a struct), and again on a keyed stream (the key replaced in place)."""
    from pyspark.sql import functions as F

    from ethereal_kafka.plan.chaining import key_step
    from ethereal_kafka.plan.schema import KEY

    frame = spark.createDataFrame([("x", 1, 0), ("y", 2, 1)], f"a string, b long, {PART} int")
    one = frame.withColumn(KEY, F.col("a"))
    two = frame.withColumn(KEY, F.struct(F.col("a"), F.col("b")))
    again = one.withColumn(KEY, F.col("b"))
    for before, after, fields in ((frame, one, ("a",)), (frame, two, ("a", "b")), (one, again, ("b",))):
        step = key_step(fields, after)
        got = pa.Table.from_batches(list(step(before.toArrow().to_batches())))
        want = after.toArrow()
        assert got.schema.names == want.schema.names, fields
        assert got.cast(want.schema).to_pylist() == want.to_pylist(), fields
