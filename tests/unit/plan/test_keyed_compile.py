"""Compiling process functions and rolling aggregates (no data runs): time modes, output schemas, the errors a
pipeline gets, and the refusal of framework operators on the in-memory state store."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.functions import AggregateFunction, KeyedProcessFunction
from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.plan.context import CompileContext, _refuse_framework_operator
from ethereal_kafka.plan.keyed import compile_process, compile_rolling, resolve_time_mode
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

ALERTS = OutputTag("alerts", "user string, n long")


class Echo(KeyedProcessFunction):
    def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
        yield value


class Count(AggregateFunction[int]):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: dict[str, Any], accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator


def _stream(
    spark: SparkSession, watermarked: bool = True, keyed: bool = True, selector: bool = False
) -> Stream:
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([], "user string, amount long, ts long").select(
        "user", "amount", "ts", F.timestamp_millis("ts").alias("__ts"), F.col("user").alias("__key")
    )
    if not watermarked:
        frame = frame.drop("__ts")
    if not keyed:
        frame = frame.drop("__key")
    return Stream.of(
        frame, key_fields=(() if selector else ("user",)) if keyed else None, watermarked=watermarked
    )


def _ctx(spark: SparkSession) -> CompileContext:
    return CompileContext(spark, None, {}, {})


def _process(**attrs: Any) -> g.ProcessNode:
    return g.ProcessNode(id=3, inputs=(), **{"function": Echo(), **attrs})


def test_auto_time_mode_follows_the_watermark_and_event_mode_needs_one(spark: SparkSession) -> None:
    assert resolve_time_mode(_process(), _stream(spark)) == "event"
    assert resolve_time_mode(_process(), _stream(spark, watermarked=False)) == "processing"
    assert resolve_time_mode(_process(time_mode="processing"), _stream(spark)) == "processing"
    with pytest.raises(GraphError, match="process#3: time_mode='event' needs event time"):
        resolve_time_mode(_process(time_mode="event"), _stream(spark, watermarked=False))


def test_process_output_has_the_declared_fields_hidden_columns_and_side_outputs(spark: SparkSession) -> None:
    node = _process(output_type="user string, n long", side_outputs=(ALERTS,))
    out = compile_process(_ctx(spark), node, [_stream(spark)])
    assert out.fields == ("user", "n")
    assert out.frame.columns == ["user", "n", "__ts", "__key", "__tag", "__side_alerts", "__seq"]
    assert out.tags == (ALERTS,) and out.stateful and out.key_fields == ("user",)
    plain = compile_process(
        _ctx(spark), _process(time_mode="processing"), [_stream(spark, watermarked=False)]
    )
    assert plain.frame.columns == ["user", "amount", "ts", "__key", "__seq"], "no event time in, none out"


def test_process_refuses_unkeyed_streams_non_functions_and_unpicklable_ones(spark: SparkSession) -> None:
    with pytest.raises(GraphError, match="needs a keyed stream"):
        compile_process(_ctx(spark), _process(), [_stream(spark, keyed=False)])
    with pytest.raises(GraphError, match="takes a KeyedProcessFunction"):
        compile_process(_ctx(spark), _process(function=len), [_stream(spark)])

    class Locked(Echo):
        def __init__(self) -> None:
            self.lock = threading.Lock()

    with pytest.raises(GraphError, match="cannot be shipped to Spark's executors"):
        compile_process(_ctx(spark), _process(function=Locked()), [_stream(spark)])


def test_rolling_outputs(spark: SparkSession) -> None:
    def rolling(**attrs: Any) -> Stream:
        return compile_rolling(_ctx(spark), g.RollingNode(id=5, inputs=(), **attrs), [_stream(spark)])

    assert rolling(kind="sum", field_name="amount").fields == ("user", "amount", "ts")
    assert rolling(kind="reduce", function=lambda a, b: a).fields == ("user", "amount", "ts")
    assert rolling(kind="aggregate", function=Count(), output_type="value long").fields == ("user", "value")
    selector = compile_rolling(
        _ctx(spark),
        g.RollingNode(id=5, inputs=(), kind="aggregate", function=Count(), output_type="value long"),
        [_stream(spark, selector=True)],
    )
    assert selector.fields == ("key", "value")


def test_rolling_errors_name_the_operator(spark: SparkSession) -> None:
    def rolling(**attrs: Any) -> Stream:
        return compile_rolling(_ctx(spark), g.RollingNode(id=5, inputs=(), **attrs), [_stream(spark)])

    with pytest.raises(GraphError, match="rolling#5: aggregate needs output_type"):
        rolling(kind="aggregate", function=Count())
    with pytest.raises(GraphError, match="takes an AggregateFunction"):
        rolling(kind="aggregate", function=len, output_type="value long")
    with pytest.raises(GraphError, match="cannot sum field 'user'"):
        rolling(kind="sum", field_name="user")
    assert rolling(kind="max", field_name="user").fields[0] == "user", "strings have an order"
    with pytest.raises(GraphError, match="no field 'nope'"):
        rolling(kind="min", field_name="nope")


def test_framework_operators_are_refused_on_the_memory_state_store(spark: SparkSession) -> None:
    node = _process()
    framework = compile_process(_ctx(spark), node, [_stream(spark)])
    with pytest.raises(
        GraphError, match=r"process#3 runs on the framework's stateful operator .* state.backend=memory"
    ):
        _refuse_framework_operator(node, framework, "memory")
    _refuse_framework_operator(g.MapNode(id=1, inputs=()), _stream(spark), "memory")  # no transformWithState


def test_auto_gives_the_memory_store_only_to_state_the_watermark_bounds(spark: SparkSession) -> None:
    """`state.backend=auto` (the store `plan.classify.classify` gives): Spark-native state the watermark evicts runs in
    memory; a running aggregate, a join or deduplication on keys alone, a query without a watermark, or the
    framework's operator (transformWithState), on RocksDB."""
    from pyspark.sql import functions as F

    from ethereal_kafka.plan.classify import classify

    def state_store_for(frame: Any) -> str:
        return classify(frame)[3]

    rate = spark.readStream.format("rate").load()
    timed = rate.withWatermark("timestamp", "1 second")
    other = (
        spark.readStream.format("rate")
        .load()
        .withWatermark("timestamp", "1 second")
        .selectExpr("value AS v2", "timestamp AS t2")
    )
    key = (F.col("value") % 3).alias("k")
    bounded = {
        "window": timed.groupBy(F.window("timestamp", "10 seconds"), key).count(),
        "session window": timed.groupBy(F.session_window("timestamp", "10 seconds")).count(),
        "join with a time range": timed.join(
            other, F.expr("value = v2 AND t2 BETWEEN timestamp AND timestamp + INTERVAL 10 SECONDS")
        ),
        "deduplication within the watermark": timed.dropDuplicatesWithinWatermark(["value"]),
        "deduplication with the event time": timed.dropDuplicates(["value", "timestamp"]),
    }
    unbounded = {
        "no watermark": rate.groupBy(F.window("timestamp", "10 seconds")).count(),
        "a running aggregate under a watermark": timed.groupBy(key).count(),
        "a join on keys alone": timed.join(other, F.expr("value = v2")),
        "deduplication on keys alone": timed.dropDuplicates(["value"]),
    }
    assert {name: state_store_for(f) for name, f in bounded.items()} == dict.fromkeys(bounded, "memory")
    assert {name: state_store_for(f) for name, f in unbounded.items()} == dict.fromkeys(unbounded, "rocksdb")
    framework = compile_process(_ctx(spark), _process(), [_stream(spark)])
    assert state_store_for(framework.frame) == "rocksdb"
