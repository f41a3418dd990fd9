"""Compile broadcast state: a stream connected with a broadcast stream (`events.key_by(k).connect(rules.broadcast(d))
.process(f)`, or unkeyed), on the framework's broadcast operator (`plan.operators.broadcast`, which says how every
parallel instance keeps the same broadcast state).

The two inputs become one frame grouped by bucket (`__key`): the first input's rows carry their element (`__in1`),
their key (`__ukey`) and the bucket of that key; every broadcast row (`__in2`) is repeated once per bucket. Both
inputs must have event time or neither.

Output fields: `output_type`'s (default: the first input's), with event time carried on and, for a keyed first
input, its key (`__key`) as after `KeyedStream.process`; an unkeyed first input gives an unkeyed stream.
"""

from __future__ import annotations

from typing import Any

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.plan.conform import source_topics
from ethereal_kafka.plan.connected import element_struct, hidden_column, type_of
from ethereal_kafka.plan.context import CompileContext, register
from ethereal_kafka.plan.keyed import (
    SPARK_TIME_MODES,
    check_picklable,
    event_time_bound,
    input_struct,
    output_layout,
    output_schema,
)
from ethereal_kafka.plan.operators.base import transform
from ethereal_kafka.plan.schema import KEY, OFFSET, PART, TS, arrow_struct
from ethereal_kafka.plan.stream import Stream


@register(g.BroadcastNode)
def compile_broadcast(ctx: CompileContext, node: g.BroadcastNode, inputs: list[Stream]) -> Stream:
    """The broadcast input as it is: only the broadcast operator reads it (and replicates it per bucket)."""
    (stream,) = inputs
    return stream


@register(g.BroadcastProcessNode)
def compile_broadcast_process(
    ctx: CompileContext, node: g.BroadcastProcessNode, inputs: list[Stream]
) -> Stream:
    """A broadcast process function on the framework's broadcast operator (see the module docstring).

    Raises:
        GraphError: the second input is not a broadcast stream, a keyed function on an unkeyed input, one input
            with event time and the other without, `time_mode='event'` without event time, or a side output
            repeated.
    """

    from ethereal_kafka.plan.operators.broadcast import BroadcastProcessor, BroadcastSpec

    main, rules = inputs
    broadcast = node.inputs[1]
    if not isinstance(broadcast, g.BroadcastNode):
        raise GraphError(
            f"{node.label}: the second input must be a broadcast stream (stream.broadcast(descriptor))"
        )
    if node.keyed and not main.keyed:
        raise GraphError(
            f"{node.label}: a KeyedBroadcastProcessFunction needs a keyed stream (call key_by first)"
        )
    if main.event_time != rules.event_time:
        raise GraphError(
            f"{node.label}: only one input has event time; call assign_timestamps_and_watermarks on both the "
            "stream and the broadcast stream, or neither"
        )
    user = arrow_struct(node.output_type, node.label) if node.output_type else input_struct(main)
    layout, sides = output_layout(node, user)
    keyed = node.keyed
    key_type = main.frame.schema[KEY].dataType if keyed else None
    frame = _combined(main, rules, keyed)
    schema = output_schema(main, user, sides, key_type or _string())
    mode = _time_mode(node, main) if keyed and has_timers(node.function) else None
    spec = BroadcastSpec(
        node.label,
        node.function,
        keyed,
        tuple(d.name for d in broadcast.descriptors),
        (main.key_fields or ()) if keyed else (),
        layout,
        tuple(schema.fieldNames()),
        topics=source_topics(node, ctx.sources),
        mode=mode,
        event_time=main.watermarked,
        bound_ms=event_time_bound(node) if main.watermarked else None,
        on_error=ctx.errors_for(node, main.positioned, placed_by=node.inputs[0]),
    )
    check_picklable(node.label, spec)
    out = transform(
        frame,
        BroadcastProcessor(spec),
        schema,
        SPARK_TIME_MODES[mode] if mode else "None",
        ctx.initial_state(node),  # per bucket, as a savepoint took it (`BUCKETS` is fixed)
        node.label,
    )
    if not main.event_time:
        out = out.drop(TS)
    if not keyed:
        out = out.drop(KEY)
    return Stream.of(
        out,
        key_fields=main.key_fields if keyed else None,
        watermarked=main.watermarked,
        stateful=True,
        tags=node.side_outputs,
    )


def has_timers(function: Any) -> bool:
    """True when a broadcast function defines its own `on_timer` (the operator then runs with Spark timers)."""
    from ethereal_kafka.api.functions import KeyedBroadcastProcessFunction

    method = getattr(type(function), "on_timer", None)
    return callable(method) and method is not KeyedBroadcastProcessFunction.on_timer


def _time_mode(node: g.BroadcastProcessNode, main: Stream) -> str:
    """`event` or `processing` (`auto`: event when the inputs have event time)."""
    mode = node.time_mode
    if mode == "auto":
        return "event" if main.watermarked else "processing"
    if mode == "event" and not main.watermarked:
        raise GraphError(
            f"{node.label}: time_mode='event' needs event time: call assign_timestamps_and_watermarks on both "
            "inputs"
        )
    return mode


def _string() -> Any:
    from pyspark.sql.types import StringType

    return StringType()


def _combined(main: Stream, rules: Stream, keyed: bool) -> Any:
    """One frame: the first input's rows in their key's bucket, every broadcast row in every bucket."""
    from pyspark.sql import functions as F

    from ethereal_kafka.plan.operators.broadcast import BUCKETS, USER_KEY
    from ethereal_kafka.plan.operators.coprocess import FIRST, INPUT, SECOND

    one, two = element_struct(main), element_struct(rules)
    one_type, two_type = type_of(main.frame, one), type_of(rules.frame, two)
    key_type = main.frame.schema[KEY].dataType if keyed else _string()
    event_time = main.event_time and rules.event_time
    if keyed:
        bucket, user_key = F.pmod(F.hash(F.col(KEY)), F.lit(BUCKETS)), F.col(KEY)
    else:
        position = [F.col(c) for c in (PART, OFFSET) if c in main.frame.columns]
        bucket, user_key = F.pmod(F.hash(one, *position), F.lit(BUCKETS)), F.lit(None).cast(key_type)

    def shaped(frame: Any, index: int, first: Any, second: Any, stream: Stream, key: Any, ukey: Any) -> Any:
        return frame.select(
            F.lit(index).alias(INPUT),
            first.alias(FIRST),
            second.alias(SECOND),
            hidden_column(stream, PART, "long"),
            hidden_column(stream, OFFSET, "long"),
            *([hidden_column(stream, TS, "timestamp")] if event_time else []),
            key.alias(KEY),
            ukey.alias(USER_KEY),
        )

    every_bucket = F.explode(F.sequence(F.lit(0), F.lit(BUCKETS - 1)))
    left = shaped(main.frame, 1, one, F.lit(None).cast(two_type), main, bucket, user_key)
    right = shaped(
        rules.frame, 2, F.lit(None).cast(one_type), two, rules, every_bucket, F.lit(None).cast(key_type)
    )
    return left.unionByName(right)
