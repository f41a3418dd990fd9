"""Compiling window nodes (no data runs): native vs framework, Spark aggregates the framework evaluates, the errors a
pipeline gets for combinations that cannot work, and the session settings of idle-declared inputs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.api.time import Duration
from ethereal_kafka.api.watermarks import WatermarkStrategy
from ethereal_kafka.api.windows import (
    CountWindows,
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from ethereal_kafka.plan.context import CompileContext
from ethereal_kafka.plan.operators.window_functions import translate_aggregates
from ethereal_kafka.plan.stream import Stream
from ethereal_kafka.plan.windows import compile_window, runs_native, watermark_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def node(assigner: Any, function: g.WindowFunction, **attrs: Any) -> g.WindowNode:
    return g.WindowNode(id=4, inputs=(), assigner=assigner, function=function, **attrs)


AGG = g.WindowFunction("agg", columns=("count(1) AS n", "sum(amount) AS total"))


@pytest.fixture
def keyed(spark: SparkSession) -> Stream:
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([], "user string, amount long, price double, ts long").select(
        "user", "amount", "price", "ts", F.timestamp_millis("ts").alias("__ts"), F.col("user").alias("__key")
    )
    return Stream.of(frame, key_fields=("user",), watermarked=True)


def context(spark: SparkSession) -> CompileContext:
    return CompileContext(spark, None, {}, {})


def test_native_only_without_lateness_side_output_trigger_or_max_length() -> None:
    assert runs_native(node(TumblingEventTimeWindows.of(10), AGG))
    assert runs_native(node(EventTimeSessionWindows.with_gap(5), AGG))
    assert not runs_native(node(TumblingEventTimeWindows.of(10), AGG, allowed_lateness=Duration(1)))
    assert not runs_native(node(TumblingEventTimeWindows.of(10), AGG, late_tag=OutputTag("late")))
    assert not runs_native(node(EventTimeSessionWindows.with_gap(5).with_max_length(9), AGG))
    assert not runs_native(node(CountWindows(3), AGG))
    assert not runs_native(node(TumblingEventTimeWindows.of(10), g.WindowFunction("reduce", function=max)))


def test_spark_aggregates_become_python_aggregates_with_sparks_names_and_types(spark: SparkSession) -> None:
    frame = spark.createDataFrame([], "user string, amount long, price double, __key string")
    columns = ("count(1) AS n", "sum(amount)", "avg(price) AS mean", "max(price)")
    aggregates, schema = translate_aggregates(
        frame, "__key", columns, ("user", "amount", "price"), "window#4"
    )
    assert [(a.name, a.function, a.field) for a in aggregates] == [
        ("n", "count", None),
        ("sum(amount)", "sum", "amount"),
        ("mean", "avg", "price"),
        ("max(price)", "max", "price"),
    ]
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("n", "bigint"),
        ("sum(amount)", "bigint"),
        ("mean", "double"),
        ("max(price)", "double"),
    ]


@pytest.mark.parametrize(
    "expression",
    ["count(DISTINCT user)", "sum(amount) FILTER (WHERE amount > 1)", "sum(amount * 2)", "first(user)"],
)
def test_other_aggregates_are_refused_naming_the_expression(spark: SparkSession, expression: str) -> None:
    frame = spark.createDataFrame([], "user string, amount long, __key string")
    with pytest.raises(GraphError, match=r"window#4: aggregate .* cannot run on the framework"):
        translate_aggregates(frame, "__key", (expression,), ("user", "amount"), "window#4")


def test_framework_window_output_fields(spark: SparkSession, keyed: Stream) -> None:
    lateness = node(
        SlidingEventTimeWindows.of(10, 5),
        g.WindowFunction("reduce", function=lambda a, b: a),
        allowed_lateness=Duration(5),
        late_tag=OutputTag("late"),
    )
    stream = compile_window(context(spark), lateness, [keyed])
    assert stream.fields == ("user", "window_start", "window_end", "amount", "price", "ts")
    assert [t.name for t in stream.tags] == ["late"]
    assert stream.frame.schema["__side_late"].dataType.simpleString() == (
        "struct<user:string,amount:bigint,price:double,ts:bigint>"
    )
    counted = compile_window(context(spark), node(CountWindows(2), AGG), [keyed])
    assert counted.fields == ("user", "n", "total")


def test_python_functions_need_an_output_type(spark: SparkSession, keyed: Stream) -> None:
    with pytest.raises(GraphError, match=r"window#4: aggregate.*needs output_type"):
        compile_window(
            context(spark), node(CountWindows(2), g.WindowFunction("aggregate", function=object())), [keyed]
        )


def test_an_event_time_window_after_a_stateful_operator_is_refused(
    spark: SparkSession, keyed: Stream
) -> None:
    upstream = Stream(keyed.frame, keyed.fields, keyed.key_fields, watermarked=False, stateful=True)
    with pytest.raises(GraphError, match="cannot follow another stateful operator"):
        compile_window(context(spark), node(TumblingEventTimeWindows.of(10), AGG), [upstream])
    counted = compile_window(context(spark), node(CountWindows(2), AGG), [upstream])
    assert counted.stateful
    native_upstream = Stream(keyed.frame, keyed.fields, keyed.key_fields, watermarked=True, stateful=True)
    with pytest.raises(GraphError, match="cannot follow"):
        compile_window(
            context(spark),
            node(TumblingEventTimeWindows.of(10), AGG, allowed_lateness=Duration(1)),
            [native_upstream],
        )
    assert compile_window(
        context(spark), node(TumblingEventTimeWindows.of(10), AGG), [native_upstream]
    ).stateful


def test_idleness_asks_for_the_max_watermark_policy() -> None:
    plain = g.WatermarkNode(id=1, inputs=(), strategy=WatermarkStrategy.for_bounded_out_of_orderness(5))
    idle = g.WatermarkNode(id=2, inputs=(), strategy=WatermarkStrategy().with_idleness(1000))
    union = g.UnionNode(id=3, inputs=(plain, idle))
    assert watermark_settings((g.SinkNode(id=4, inputs=(union,), sink="out"),)) == {
        "spark.sql.streaming.multipleWatermarkPolicy": "max"
    }
    assert watermark_settings((g.SinkNode(id=5, inputs=(plain,), sink="out"),)) == {}
