"""Compile connected streams: a `KeyedCoProcessFunction` over two keyed streams (`a.key_by(k).connect(b.key_by(k))
.process(f)`), on the framework's co-process operator (`plan.operators.coprocess`, the process-function operator
with two inputs). (`connect(...).map/flat_map` need no compiler: the API builds them from per-input maps and a
union.)

The two inputs become one frame, grouped by `__key`: each row carries its stream's element as a struct (`__in1` or
`__in2`), the stream's number (`__input`), its event time, key and source position. Both inputs must be keyed by
values of the same Spark type, and both watermarked or neither (event-time timers need the event time of both
inputs; the operator's watermark is the least of the two, Spark's rule for a query with several watermarks).

Output fields: `output_type`'s (default: the inputs' fields, when both have the same fields and types), with event
time (`__ts`) and the key (`__key`) carried on as after `KeyedStream.process`.

A `CoProcessFunction` on two non-keyed streams (`a.connect(b).process(f)`) runs on the same operator, its rows
grouped into `BUCKETS` buckets by a hash of each row's element and source position (so Spark can spread them over
tasks) in place of a key: no state, no timers, and its output is not keyed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.plan.conform import source_topics
from ethereal_kafka.plan.context import CompileContext, register
from ethereal_kafka.plan.keyed import (
    SPARK_TIME_MODES,
    check_picklable,
    event_time_bound,
    finish_keyed,
    input_struct,
    output_layout,
    output_schema,
    resolve_time_mode,
)
from ethereal_kafka.plan.operators.base import transform
from ethereal_kafka.plan.schema import KEY, OFFSET, PART, TS, arrow_struct
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType


@register(g.CoProcessNode)
def compile_co_process(ctx: CompileContext, node: g.CoProcessNode, inputs: list[Stream]) -> Stream:
    """A `KeyedCoProcessFunction` on the framework's co-process operator (see the module docstring).

    Raises:
        GraphError: an input is not keyed, the keys' types differ, one input has event time and the other not,
            the function lacks a method, or `output_type` is missing while the inputs' types differ.
    """
    from ethereal_kafka.plan.operators.coprocess import CoKeyedProcessor
    from ethereal_kafka.plan.operators.process import ProcessSpec

    first, second = inputs
    if not node.keyed:
        return _compile_unkeyed(ctx, node, first, second)
    for number, stream in ((1, first), (2, second)):
        if not stream.keyed:
            raise GraphError(
                f"{node.label}: connected input {number} is not keyed: key both inputs alike, "
                "a.key_by(k).connect(b.key_by(k))"
            )
    first_key, second_key = first.frame.schema[KEY].dataType, second.frame.schema[KEY].dataType
    if first_key != second_key:
        raise GraphError(
            f"{node.label}: the connected inputs are keyed by different types ({first_key.simpleString()} vs "
            f"{second_key.simpleString()}); key both by values of the same type"
        )
    if first.watermarked != second.watermarked:
        raise GraphError(
            f"{node.label}: only one connected input has event time; call assign_timestamps_and_watermarks on "
            "both inputs or neither"
        )
    for method in ("process_element1", "process_element2"):
        if not callable(getattr(node.function, method, None)):
            raise GraphError(
                f"{node.label}: process on connected streams takes a KeyedCoProcessFunction (no {method})"
            )
    user = _user_type(node, first, second)
    combined = _combined(first, second)
    mode = resolve_time_mode(node, combined)
    tags = node.side_outputs
    layout, sides = output_layout(node, user)
    schema = output_schema(combined, user, sides)
    spec = ProcessSpec(
        node.label,
        node.function,
        mode,
        combined.watermarked,
        first.key_fields or (),
        layout,
        tuple(schema.fieldNames()),
        topics=source_topics(node, ctx.sources),
        bound_ms=event_time_bound(node) if combined.watermarked else None,
        on_error=ctx.errors_for(node, first.positioned and second.positioned),
    )
    check_picklable(node.label, spec)
    initial = ctx.initial_state(node)
    frame = transform(
        combined.frame, CoKeyedProcessor(spec), schema, SPARK_TIME_MODES[mode], initial, node.label
    )
    return finish_keyed(combined, frame, tags=tags)


def _compile_unkeyed(ctx: CompileContext, node: g.CoProcessNode, first: Stream, second: Stream) -> Stream:
    """A `CoProcessFunction` over two non-keyed streams (see the module docstring)."""
    from ethereal_kafka.plan.operators.coprocess import CoKeyedProcessor
    from ethereal_kafka.plan.operators.process import ProcessSpec

    if first.keyed or second.keyed:
        raise GraphError(f"{node.label}: a CoProcessFunction connects two non-keyed streams")
    if first.watermarked != second.watermarked:
        raise GraphError(
            f"{node.label}: only one connected input has event time; call assign_timestamps_and_watermarks on "
            "both inputs or neither"
        )
    user = _user_type(node, first, second)
    combined = _combined(first, second, bucketed=True)
    layout, sides = output_layout(node, user)
    schema = output_schema(combined, user, sides)
    spec = ProcessSpec(
        node.label,
        node.function,
        "processing",  # no timers: Spark runs it without a time mode
        False,
        (),
        layout,
        tuple(schema.fieldNames()),
        topics=source_topics(node, ctx.sources),
        on_error=ctx.errors_for(node, first.positioned and second.positioned),
        keyed=False,
    )
    check_picklable(node.label, spec)
    frame = transform(combined.frame, CoKeyedProcessor(spec), schema, "None").drop(KEY)
    if not combined.event_time:
        frame = frame.drop(TS)
    return Stream.of(
        frame, key_fields=None, watermarked=combined.watermarked, stateful=True, tags=node.side_outputs
    )


def _user_type(node: g.CoProcessNode, first: Stream, second: Stream) -> pa.StructType:
    if node.output_type:
        return arrow_struct(node.output_type, node.label)
    one, two = input_struct(first), input_struct(second)
    if one != two:
        raise GraphError(
            f"{node.label}: the connected inputs have different fields ({', '.join(first.fields)} vs "
            f"{', '.join(second.fields)}): give process(..., output_type=...) the Spark DDL of the output"
        )
    return one


def _combined(first: Stream, second: Stream, bucketed: bool = False) -> Stream:
    """One frame carrying both inputs' rows (see the module docstring); `bucketed`: `__key` is a bucket of each
    row's element and position (non-keyed inputs)."""
    from pyspark.sql import functions as F

    from ethereal_kafka.plan.operators.coprocess import FIRST, INPUT, SECOND

    structs = [element_struct(first), element_struct(second)]
    types = [type_of(s.frame, e) for s, e in zip((first, second), structs, strict=True)]
    frames = []
    event_time = first.event_time and second.event_time
    for index, stream in enumerate((first, second)):
        elements = [structs[index] if i == index else F.lit(None).cast(types[i]) for i in range(len(structs))]
        frames.append(
            stream.frame.select(
                F.lit(index + 1).alias(INPUT),
                elements[0].alias(FIRST),
                elements[1].alias(SECOND),
                hidden_column(stream, PART, "long"),
                hidden_column(stream, OFFSET, "long"),
                *([hidden_column(stream, TS, "timestamp")] if event_time else []),
                _bucket(structs[index], stream).alias(KEY) if bucketed else F.col(KEY),
            )
        )
    frame = frames[0].unionByName(frames[1])
    return Stream.of(
        frame,
        key_fields=first.key_fields,
        watermarked=first.watermarked,
        stateful=first.stateful or second.stateful,
    )


def _bucket(element: Column, stream: Stream) -> Column:
    """A bucket (0 to `BUCKETS` - 1) of a non-keyed row: a hash of its element and source position."""
    from pyspark.sql import functions as F

    from ethereal_kafka.plan.operators.broadcast import BUCKETS

    position = [F.col(c) for c in (PART, OFFSET) if c in stream.frame.columns]
    return F.pmod(F.hash(element, *position), F.lit(BUCKETS))


def element_struct(stream: Stream) -> Column:
    """A stream's user fields as one struct column."""
    from pyspark.sql import functions as F

    return F.struct(*[F.col(f"`{f}`") for f in stream.fields])


def type_of(frame: DataFrame, column: Column) -> DataType:
    """The Spark type of `column` over `frame`."""
    return frame.select(column.alias("e")).schema["e"].dataType


def hidden_column(stream: Stream, name: str, kind: str) -> Column:
    """Hidden column `name` of `stream` as type `kind` (`__ts` as it is, keeping its watermark), or a null."""
    from pyspark.sql import functions as F

    if name in stream.frame.columns:
        column = F.col(name)
        return column if name == TS else column.cast(kind).alias(name)
    return F.lit(None).cast(kind).alias(name)
