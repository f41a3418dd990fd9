"""Compile keyed operators without windows: process functions (`KeyedStream.process`) and rolling aggregates
(`KeyedStream.reduce/aggregate/sum/min/max`). Both run on the framework's operators (Spark's transformWithState,
which needs `state.backend=rocksdb`): `plan.operators.process` and `plan.operators.rolling` say what they do.

Output fields: a process function's main output has `output_type`'s fields (default: the input's), its side outputs
their tags' types; a rolling `reduce`/`sum`/`min`/`max` has the input's fields (`reduce`: or `output_type`'s), an
`aggregate` the key field(s) (`key` for a selector key) then `output_type`'s fields. Event time (`__ts`) and the
key (`__key`) carry on, so the output goes to a Kafka sink keyed by the stream's key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.plan.conform import ElementType, source_topics
from ethereal_kafka.plan.context import CompileContext, register
from ethereal_kafka.plan.operators.base import OutputLayout, transform
from ethereal_kafka.plan.schema import KEY, TAG, TS, arrow_of, arrow_struct, side_column
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

#: Spark time modes of the `time_mode` values.
SPARK_TIME_MODES = {"event": "EventTime", "processing": "ProcessingTime"}


def resolve_time_mode(node: g.ProcessNode, stream: Stream) -> str:
    """`event` or `processing` for a process node (`auto`: event on a watermarked stream).

    Raises:
        GraphError: `event` on a stream without a watermark.
    """
    mode = node.time_mode
    if mode == "auto":
        return "event" if stream.watermarked else "processing"
    if mode == "event" and not stream.watermarked:
        raise GraphError(
            f"{node.label}: time_mode='event' needs event time: call assign_timestamps_and_watermarks before key_by"
        )
    return mode


def event_time_bound(node: g.Node) -> int | None:
    """The out-of-orderness bound (ms) of the one watermark strategy upstream of `node`, by which a process
    function's watermark follows a key's elements within an epoch (`plan.operators.process`); None when there is no
    strategy, or several (a union of separately watermarked streams, whose watermark Spark takes from the least —
    or, with idleness, the most — advanced one: no single stream's elements can tell where it is)."""
    found: dict[int, int] = {}
    seen: set[int] = set()
    pending = list(node.inputs)
    while pending:
        current = pending.pop()
        if current.id in seen:
            continue
        seen.add(current.id)
        if isinstance(current, g.WatermarkNode) and current.strategy is not None:
            found[current.id] = current.strategy.out_of_orderness.millis
            continue  # a strategy further up is replaced by this one
        pending.extend(current.inputs)
    return next(iter(found.values())) if len(found) == 1 else None


def input_struct(stream: Stream) -> pa.StructType:
    """A stream's user fields as an Arrow struct."""
    arrow = arrow_of(stream.frame.schema)
    return pa.struct([arrow.field(f) for f in stream.fields])


def output_schema(
    stream: Stream, user: pa.StructType, sides: list[tuple[str, pa.StructType]], key_type: Any = None
) -> StructType:
    """Spark schema of an operator's rows: user fields, `__ts`, `__key` (of `key_type`, default `stream`'s key
    type), then `__tag` and one struct per side output (`sides`: tag name and fields)."""
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    from ethereal_kafka.plan.schema import spark_struct

    fields = list(spark_struct(user).fields)
    fields.append(StructField(TS, TimestampType(), True))
    fields.append(StructField(KEY, key_type or stream.frame.schema[KEY].dataType, True))
    if sides:
        fields.append(StructField(TAG, StringType(), True))
    for name, side in sides:
        fields.append(StructField(side_column(name), spark_struct(side), True))
    return StructType(fields)


def check_picklable(label: str, spec: Any) -> None:
    """Raise `GraphError` naming `label` when `spec` cannot be pickled for the executors."""
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(spec)
    except Exception as exc:
        raise GraphError(
            f"{label}: the function cannot be shipped to Spark's executors (pickling failed: {exc}); define it in "
            "an importable module and keep no open connections or locks in it"
        ) from exc


def finish_keyed(stream: Stream, frame: Any, **changes: Any) -> Stream:
    """The stream of a keyed framework operator's `frame` (shaped like `stream`; `__ts` dropped without event
    time)."""
    if not stream.event_time:
        frame = frame.drop(TS)
    return Stream.of(
        frame, key_fields=stream.key_fields, watermarked=stream.watermarked, stateful=True, **changes
    )


def output_layout(
    node: g.ProcessNode | g.BroadcastProcessNode, user: pa.StructType
) -> tuple[OutputLayout, list[tuple[str, pa.StructType]]]:
    """The output layout of a process-like operator `node` (main fields `user`, its side outputs), and the side
    outputs' fields by tag name.

    Raises:
        GraphError: a side output repeated.
    """
    names = [t.name for t in node.side_outputs]
    if len(set(names)) != len(names):
        raise GraphError(f"{node.label}: side outputs {', '.join(names)} repeat a tag name")
    sides = [
        arrow_struct(t.output_type or "", f"{node.label} side output {t.name}") for t in node.side_outputs
    ]
    layout = OutputLayout(
        tuple(f.name for f in user),
        tuple(names),
        tuple(tuple(f.name for f in side) for side in sides),
        ElementType.of(user, node.label, "output", defaulted=not node.output_type),
        tuple(
            ElementType.of(side, node.label, f"side output '{n}'")
            for n, side in zip(names, sides, strict=True)
        ),
    )
    return layout, list(zip(names, sides, strict=True))


@register(g.ProcessNode)
def compile_process(ctx: CompileContext, node: g.ProcessNode, inputs: list[Stream]) -> Stream:
    """A `KeyedProcessFunction` on the framework's process operator (`plan.operators.process`)."""
    from ethereal_kafka.plan.operators.process import KeyedProcessor, ProcessSpec

    (stream,) = inputs
    if not stream.keyed:
        raise GraphError(f"{node.label}: process needs a keyed stream (call key_by first)")
    if not callable(getattr(node.function, "process_element", None)):
        raise GraphError(
            f"{node.label}: process takes a KeyedProcessFunction (an object with process_element)"
        )
    mode = resolve_time_mode(node, stream)
    user = arrow_struct(node.output_type, node.label) if node.output_type else input_struct(stream)
    layout, sides = output_layout(node, user)
    schema = output_schema(stream, user, sides)
    spec = ProcessSpec(
        node.label,
        node.function,
        mode,
        stream.watermarked,
        stream.key_fields or (),
        layout,
        tuple(schema.fieldNames()),
        topics=source_topics(node, ctx.sources),
        bound_ms=event_time_bound(node) if stream.watermarked else None,
        on_error=ctx.errors_for(node, stream.positioned),
    )
    check_picklable(node.label, spec)
    initial = ctx.initial_state(node)
    frame = transform(stream.frame, KeyedProcessor(spec), schema, SPARK_TIME_MODES[mode], initial, node.label)
    return finish_keyed(stream, frame, tags=node.side_outputs)


def _rolling_user(node: g.RollingNode, stream: Stream) -> tuple[pa.StructType, tuple[str, ...]]:
    """The output's user fields and, for `aggregate`, the fields that hold the key."""
    inputs = input_struct(stream)
    if node.kind in ("sum", "min", "max"):
        name = node.field_name or ""
        if name not in stream.fields:
            raise GraphError(
                f"{node.label}: no field {name!r} to {node.kind} (fields: {', '.join(stream.fields)})"
            )
        kind = inputs.field(name).type
        numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
        ordered = numeric or pa.types.is_timestamp(kind) or pa.types.is_string(kind)
        if not (numeric if node.kind == "sum" else ordered):
            raise GraphError(f"{node.label}: cannot {node.kind} field {name!r} of type {kind}")
        return inputs, ()
    if node.kind == "reduce":
        if not callable(node.function):
            raise GraphError(f"{node.label}: reduce takes a ReduceFunction or a function (a, b) -> element")
        return (arrow_struct(node.output_type, node.label) if node.output_type else inputs), ()
    if not all(
        callable(getattr(node.function, m, None)) for m in ("create_accumulator", "add", "get_result")
    ):
        raise GraphError(
            f"{node.label}: aggregate takes an AggregateFunction (create_accumulator/add/get_result)"
        )
    if not node.output_type:
        raise GraphError(
            f"{node.label}: aggregate needs output_type, the Spark DDL of get_result's fields "
            "(e.g. 'count long, total double'; a single value goes in field 'value')"
        )
    result = arrow_struct(node.output_type, node.label)
    key_names = stream.key_fields or ("key",)
    arrow = arrow_of(stream.frame.schema)
    if stream.key_fields:
        key_part = [arrow.field(f) for f in key_names if f not in result.names]
    else:
        key_part = [pa.field("key", arrow.field(KEY).type)] if "key" not in result.names else []
    return pa.struct([*key_part, *list(result)]), tuple(key_names)


@register(g.RollingNode)
def compile_rolling(ctx: CompileContext, node: g.RollingNode, inputs: list[Stream]) -> Stream:
    """A rolling `reduce`/`aggregate`/`sum`/`min`/`max` on the framework's rolling operator."""
    from ethereal_kafka.plan.operators.rolling import KINDS, RollingProcessor, RollingSpec

    (stream,) = inputs
    if not stream.keyed:
        raise GraphError(f"{node.label}: {node.kind} needs a keyed stream (call key_by first)")
    if node.kind not in KINDS:
        raise GraphError(
            f"{node.label}: unknown rolling aggregate {node.kind!r} (expected {', '.join(KINDS)})"
        )
    user, key_names = _rolling_user(node, stream)
    defaulted = node.kind == "reduce" and not node.output_type
    layout = OutputLayout(
        tuple(f.name for f in user), main_type=ElementType.of(user, node.label, "output", defaulted=defaulted)
    )
    schema = output_schema(stream, user, [])
    spec = RollingSpec(
        node.label,
        node.kind,
        node.function,
        node.field_name,
        key_names,
        layout,
        tuple(schema.fieldNames()),
        topics=source_topics(node, ctx.sources),
    )
    check_picklable(node.label, spec)
    frame = transform(
        stream.frame, RollingProcessor(spec), schema, "None", ctx.initial_state(node), node.label
    )
    return finish_keyed(stream, frame)
