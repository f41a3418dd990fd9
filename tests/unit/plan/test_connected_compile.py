"""Compiling a keyed co-process function (no data runs): the output schema, the one frame both inputs become, and
the errors a pipeline gets for inputs that cannot be connected."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.functions import KeyedCoProcessFunction
from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.plan.connected import _combined, compile_co_process
from ethereal_kafka.plan.context import CompileContext
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


class Shared(KeyedCoProcessFunction):
    def process_element1(self, value: dict[str, Any], ctx: Any) -> Any:
        yield value

    def process_element2(self, value: dict[str, Any], ctx: Any) -> Any:
        yield value


def _stream(
    spark: SparkSession,
    ddl: str,
    key: str,
    key_type: str = "string",
    watermarked: bool = True,
    keyed: bool = True,
) -> Stream:
    from pyspark.sql import functions as F

    names = [part.split()[0] for part in ddl.split(",")]
    frame = spark.createDataFrame([], ddl).select(
        *names,
        F.lit(0).alias("__part"),
        F.lit(0).cast("long").alias("__off"),
        F.timestamp_millis("ts").alias("__ts"),
        F.col(key).cast(key_type).alias("__key"),
    )
    if not watermarked:
        frame = frame.drop("__ts")
    if not keyed:
        frame = frame.drop("__key")
    return Stream.of(frame, key_fields=(key,) if keyed else None, watermarked=watermarked)


def _node(**attrs: Any) -> g.CoProcessNode:
    return g.CoProcessNode(id=7, inputs=(), **{"function": Shared(), **attrs})


def _ctx(spark: SparkSession) -> CompileContext:
    return CompileContext(spark, None, {}, {})


def test_both_inputs_become_one_frame_and_the_output_has_the_declared_fields(spark: SparkSession) -> None:
    events = _stream(spark, "user string, amount long, ts long", "user")
    limits = _stream(spark, "account string, lim long, ts long", "account")
    combined = _combined(events, limits)
    assert combined.frame.columns == ["__input", "__in1", "__in2", "__part", "__off", "__ts", "__key"]
    assert (
        combined.frame.schema["__in2"].dataType.simpleString()
        == "struct<account:string,lim:bigint,ts:bigint>"
    )
    tag = OutputTag("odd", "user string")
    out = compile_co_process(
        _ctx(spark), _node(output_type="user string, n long", side_outputs=(tag,)), [events, limits]
    )
    assert out.frame.columns == ["user", "n", "__ts", "__key", "__tag", "__side_odd", "__seq"]
    assert out.stateful and out.tags == (tag,) and out.key_fields == ("user",)
    same = compile_co_process(
        _ctx(spark), _node(), [events, _stream(spark, "user string, amount long, ts long", "user")]
    )
    assert same.fields == ("user", "amount", "ts"), "inputs of one type: the output defaults to it"


def test_inputs_that_cannot_be_connected_are_refused_naming_the_operator(spark: SparkSession) -> None:
    events = _stream(spark, "user string, amount long, ts long", "user")
    with pytest.raises(
        GraphError,
        match=r"coprocess#7: the connected inputs are keyed by different types \(string vs bigint\)",
    ):
        compile_co_process(
            _ctx(spark),
            _node(output_type="n long"),
            [events, _stream(spark, "id long, ts long", "id", "long")],
        )
    with pytest.raises(GraphError, match="coprocess#7: connected input 2 is not keyed"):
        compile_co_process(
            _ctx(spark),
            _node(output_type="n long"),
            [events, _stream(spark, "user string, ts long", "user", keyed=False)],
        )
    with pytest.raises(GraphError, match="only one connected input has event time"):
        compile_co_process(
            _ctx(spark),
            _node(output_type="n long"),
            [events, _stream(spark, "user string, ts long", "user", watermarked=False)],
        )
    with pytest.raises(GraphError, match=r"different fields .* give process\(\.\.\., output_type="):
        compile_co_process(_ctx(spark), _node(), [events, _stream(spark, "user string, ts long", "user")])


def test_unkeyed_inputs_are_bucketed_and_give_an_unkeyed_stream(spark: SparkSession) -> None:
    events = _stream(spark, "user string, amount long, ts long", "user", keyed=False)
    limits = _stream(spark, "account string, lim long, ts long", "account", keyed=False)
    out = compile_co_process(
        _ctx(spark), _node(output_type="user string, n long", keyed=False), [events, limits]
    )
    assert out.frame.columns == ["user", "n", "__ts", "__seq"]
    assert not out.keyed and out.stateful and out.watermarked
    with pytest.raises(GraphError, match="a CoProcessFunction connects two non-keyed streams"):
        compile_co_process(
            _ctx(spark),
            _node(output_type="n long", keyed=False),
            [events, _stream(spark, "user string, ts long", "user")],
        )
