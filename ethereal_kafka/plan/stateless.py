"""Compilers of the per-element operators: sources, Python functions, column expressions, event time, keys,
unions and side-output selection. None of them shuffles: a query made only of these stays partition-preserving.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.watermarks import DEFAULT_TIMESTAMP_FIELD
from ethereal_kafka.plan.chaining import key_step, map_step, source_step
from ethereal_kafka.plan.conform import source_topics
from ethereal_kafka.plan.context import CompileContext, register
from ethereal_kafka.plan.event_time import carried_watermark
from ethereal_kafka.plan.outputs import side_output
from ethereal_kafka.plan.pyfuncs import PyStage
from ethereal_kafka.plan.schema import KEY, OFFSET, PART, RECORD_TS, TS, arrow_of, arrow_struct, spark_struct
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


@register(g.SourceNode)
def compile_source(ctx: CompileContext, node: g.SourceNode, inputs: list[Stream]) -> Stream:
    """The source's records as user fields (`KafkaSourceConfig.pipeline_columns`: the decoded payload and the
    metadata the source lists), plus `__part`/`__off` (the record's position) and `__rts` (its Kafka timestamp, the
    default event time)."""
    from pyspark.sql import functions as F

    config = ctx.sources.get(node.source)
    if config is None:
        raise GraphError(f"{node.label}: the job has no source named {node.source!r}")
    frame = ctx.spark.readStream.format("ethereal-kafka").options(**config.to_properties()).load()
    fields = config.pipeline_columns(frame.columns)
    frame = frame.select(
        *[F.col(f"`{c}`") for c in fields],
        F.col("partition").alias(PART),
        F.col("offset").alias(OFFSET),
        F.col("timestamp").alias(RECORD_TS),
    )
    columns = [(c, c) for c in fields] + [("partition", PART), ("offset", OFFSET), ("timestamp", RECORD_TS)]
    chain = None if config.pin_tables else (source_step(frame, columns),)
    return Stream.of(frame, chain=chain, chain_end=frame)


@register(g.MapNode)
def compile_map(ctx: CompileContext, node: g.MapNode, inputs: list[Stream]) -> Stream:
    """`map` / `flat_map` / `filter` with a Python function: one `mapInArrow` step."""
    (stream,) = inputs
    arrow = arrow_of(stream.frame.schema)
    user_in = pa.struct([arrow.field(f) for f in stream.fields])
    if node.kind == "filter" or node.output_type is None:
        user_out = user_in
    else:
        user_out = arrow_struct(node.output_type, node.label)
    hidden = stream.hidden()
    assert node.function is not None
    stage = PyStage(
        node.label,
        node.kind,
        node.function,
        tuple(stream.fields),
        user_out,
        tuple(hidden),
        tuple(arrow.field(h).type for h in hidden),
        topics=source_topics(node, ctx.sources),
        defaulted=node.kind != "filter" and node.output_type is None,
        on_error=ctx.errors_for(node, stream.positioned),
    )
    frame = keep_event_time(stream.frame, stream.frame.mapInArrow(stage, spark_struct(stage.output_schema())))
    return stream.chained_into(frame, map_step(stage, stream.frame))


def keep_event_time(before: DataFrame, after: DataFrame) -> DataFrame:
    """`after` (a `mapInArrow` over `before`) with `__ts` marked as the event-time column again.

    A Python step loses the column metadata by which Spark's stateful operators recognise event time
    (`spark.watermarkDelayMs`, set by `withWatermark`); Spark-native windows and joins after it would otherwise
    refuse the query ("append mode not supported without watermark"). The query's watermark itself is unchanged.
    """
    from pyspark.sql import functions as F

    if TS not in before.columns or TS not in after.columns:
        return after
    metadata = before.schema[TS].metadata
    if "spark.watermarkDelayMs" not in metadata:
        return after
    return after.withColumn(TS, F.col(TS).alias(TS, metadata=metadata))


@register(g.ExprNode)
def compile_expr(ctx: CompileContext, node: g.ExprNode, inputs: list[Stream]) -> Stream:
    """Spark column expressions; hidden columns are kept alongside."""
    (stream,) = inputs
    columns = [_column(c) for c in node.columns]
    hidden = [c for c in stream.hidden()]
    if node.kind == "where":
        frame = stream.frame.where(columns[0])
    elif node.kind == "with_columns":
        frame = stream.frame.withColumns(dict(zip(node.names, columns, strict=True)))
    else:
        frame = stream.frame.select(*columns, *hidden)
    try:
        frame.schema  # analyse now: a bad column name fails here, naming the operator  # noqa: B018
    except Exception as exc:
        raise GraphError(f"{node.label}: {exc}") from exc
    if node.kind == "select" and any(c.startswith("__") for c in frame.columns[: len(columns)]):
        raise GraphError(f"{node.label}: selected names starting with '__' are reserved")
    return stream.with_frame(frame)


def _column(value: Any) -> Column:
    from pyspark.sql import functions as F

    return F.expr(value) if isinstance(value, str) else value


@register(g.WatermarkNode)
def compile_watermark(ctx: CompileContext, node: g.WatermarkNode, inputs: list[Stream]) -> Stream:
    """`__ts` from the strategy's field or function, then Spark's `withWatermark` on it (carrying the input's event
    time across restarts when the query has several watermarked inputs: `plan.event_time`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, TimestampType

    (stream,) = inputs
    strategy = node.strategy
    if strategy.timestamp_assigner is not None:
        frame, _ = _computed(
            stream,
            node.label,
            strategy.timestamp_assigner,
            TS,
            pa.timestamp("us", tz="UTC"),
            _ms_to_datetime,
            source_topics(node, ctx.sources),
            ctx.errors_for(node, stream.positioned),
        )
    else:
        name = strategy.timestamp_field
        if (
            name == DEFAULT_TIMESTAMP_FIELD
            and name not in stream.fields
            and RECORD_TS in stream.frame.columns
        ):
            name = RECORD_TS  # the record's Kafka timestamp, as Flink's Kafka source assigns it
        elif name not in stream.fields:
            raise GraphError(
                f"{node.label}: no field {name!r} to take event time from (fields: {', '.join(stream.fields)})"
            )
        kind = stream.frame.schema[name].dataType
        if isinstance(kind, TimestampType):
            ts = F.col(f"`{name}`")
        elif isinstance(kind, LongType) or kind.typeName() in (
            "integer",
            "short",
            "double",
            "float",
            "decimal",
        ):
            ts = F.timestamp_millis(F.col(f"`{name}`").cast("long"))
        else:
            ts = F.to_timestamp(F.col(f"`{name}`"))
        frame = stream.frame.withColumn(TS, ts)
    delay = strategy.out_of_orderness.spark_interval()
    key = ctx.carry_key(node.id)
    if key is not None:
        frame = carried_watermark(frame, node.id, ctx.carrier(key, frame.schema), delay)
    else:
        frame = frame.withWatermark(TS, delay)
    return stream.with_frame(frame, watermarked=True)


def _ms_to_datetime(value: Any) -> Any:
    import datetime

    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        return value
    return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)


def _computed(
    stream: Stream,
    label: str,
    function: Any,
    target: str,
    arrow_type: pa.DataType,
    convert: Any = None,
    topics: str = "",
    on_error: Any = None,
) -> tuple[DataFrame, PyStage]:
    """Compute hidden column `target` per element with a Python function (mapInArrow); the frame, and the step for
    a chain (`plan.chaining`)."""
    arrow = arrow_of(stream.frame.schema)
    hidden = [h for h in stream.hidden() if h != target] + [target]
    types = [arrow.field(h).type if h != target else arrow_type for h in hidden]
    stage = PyStage(
        label,
        "column",
        function,
        tuple(stream.fields),
        pa.struct([arrow.field(f) for f in stream.fields]),
        tuple(hidden),
        tuple(types),
        target=target,
        target_type=arrow_type,
        target_convert=convert,
        topics=topics,
        on_error=on_error,
    )
    return keep_event_time(
        stream.frame, stream.frame.mapInArrow(stage, spark_struct(stage.output_schema()))
    ), stage


@register(g.KeyByNode)
def compile_key_by(ctx: CompileContext, node: g.KeyByNode, inputs: list[Stream]) -> Stream:
    """`__key` from the key field(s) (a struct for several) or from a Python selector."""
    from pyspark.sql import functions as F

    (stream,) = inputs
    if node.selector is not None:
        key_type = arrow_struct(f"k {node.key_type}", node.label).field("k").type
        topics = source_topics(node, ctx.sources)
        on_error = ctx.errors_for(node, stream.positioned)
        frame, stage = _computed(
            stream, node.label, node.selector, KEY, key_type, topics=topics, on_error=on_error
        )
        return stream.chained_into(frame, map_step(stage, stream.frame), key_fields=())
    missing = [f for f in node.fields if f not in stream.fields]
    if missing:
        raise GraphError(
            f"{node.label}: no field(s) {', '.join(missing)} (fields: {', '.join(stream.fields)})"
        )
    key = (
        F.col(f"`{node.fields[0]}`")
        if len(node.fields) == 1
        else F.struct(*[F.col(f"`{f}`") for f in node.fields])
    )
    frame = stream.frame.withColumn(KEY, key)
    return stream.chained_into(frame, key_step(node.fields, frame), key_fields=node.fields)


@register(g.UnionNode)
def compile_union(ctx: CompileContext, node: g.UnionNode, inputs: list[Stream]) -> Stream:
    """All inputs' elements (same user fields, by name); hidden columns present in every input are kept."""
    first = inputs[0]
    for other in inputs[1:]:
        if set(other.fields) != set(first.fields):
            raise GraphError(
                f"{node.label}: union of streams with different fields ({', '.join(first.fields)} vs "
                f"{', '.join(other.fields)})"
            )
    hidden = [h for h in first.hidden() if all(h in s.frame.columns for s in inputs)]
    columns = [*first.fields, *hidden]
    frame = first.frame.select(*columns)
    for other in inputs[1:]:
        frame = frame.unionByName(other.frame.select(*columns))
    keyed = first.key_fields if all(s.key_fields == first.key_fields for s in inputs) else None
    return Stream.of(
        frame,
        key_fields=keyed if KEY in hidden else None,
        watermarked=any(s.watermarked for s in inputs),
        stateful=any(s.stateful for s in inputs),
    )


@register(g.SideOutputNode)
def compile_side_output(ctx: CompileContext, node: g.SideOutputNode, inputs: list[Stream]) -> Stream:
    """The elements the input operator emitted to the tag."""
    (stream,) = inputs
    assert node.tag is not None
    return side_output(stream, node.tag.name, node.label)
