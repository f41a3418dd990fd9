"""Compile keyed windows: Spark-native where Spark's semantics are the API's, the framework's operator otherwise.

Spark-native (`groupBy(key, window(...)).agg(...)` / `session_window`, append mode): tumbling, sliding and
session windows (without a max length) computed with Spark aggregate expressions (`agg`, `count`, `sum`), without
allowed lateness, a late-data side output or a custom trigger. Spark then drops records behind the previous
epoch's watermark and emits each window once, when the watermark passes its end.

Everything else — Python `aggregate`/`reduce`/`process`, count and global windows, triggers, allowed lateness with
late firings, late-data side outputs, session max length — runs on the framework's window operator
(`plan.operators.window`, on Spark's transformWithState).

Output fields: the key field(s) (`key` for a selector key), `window_start`, `window_end` (timestamps; not for
count/global windows), then the aggregate's fields. `__ts` becomes the window's last instant (`end - 1 ms`), so
an event-time operator can follow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.windows import (
    EventTimeSessionWindows,
    EventTimeTrigger,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from ethereal_kafka.plan.compiler import CompileContext, register
from ethereal_kafka.plan.schema import KEY, TS
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql import Column


def runs_native(node: g.WindowNode) -> bool:
    """True when Spark's own window aggregation has the API's semantics for `node`."""
    function = node.function
    assigner = node.assigner
    if function is None or function.kind != "agg":
        return False
    if node.allowed_lateness.millis or node.late_tag is not None:
        return False
    if node.trigger is not None and not isinstance(node.trigger, EventTimeTrigger):
        return False
    if isinstance(assigner, EventTimeSessionWindows):
        return assigner.max_length is None
    return isinstance(assigner, TumblingEventTimeWindows | SlidingEventTimeWindows)


@register(g.WindowNode)
def compile_window(ctx: CompileContext, node: g.WindowNode, inputs: list[Stream]) -> Stream:
    """Dispatch to the native or the framework window (see the module docstring)."""
    (stream,) = inputs
    if not stream.keyed:
        raise GraphError(f"{node.label}: window needs a keyed stream (call key_by first)")
    if node.assigner is not None and node.assigner.event_time and not stream.watermarked:
        raise GraphError(
            f"{node.label}: event-time windows need event time: call assign_timestamps_and_watermarks before key_by"
        )
    if runs_native(node):
        return _native(ctx, node, stream)
    try:
        from ethereal_kafka.plan.operators.window import compile_framework_window
    except ModuleNotFoundError as exc:
        raise GraphError(
            f"{node.label}: this window needs the framework's window operator, not available"
        ) from exc
    return compile_framework_window(ctx, node, stream)


def _native(ctx: CompileContext, node: g.WindowNode, stream: Stream) -> Stream:
    from pyspark.sql import functions as F

    assigner = node.assigner
    ts = F.col(TS)
    if isinstance(assigner, TumblingEventTimeWindows):
        window = F.window(ts, assigner.size.spark_interval(), startTime=assigner.offset.spark_interval())
    elif isinstance(assigner, SlidingEventTimeWindows):
        window = F.window(
            ts,
            assigner.size.spark_interval(),
            assigner.slide.spark_interval(),
            startTime=assigner.offset.spark_interval(),
        )
    else:
        assert isinstance(assigner, EventTimeSessionWindows)
        window = F.session_window(ts, assigner.gap.spark_interval())
    assert node.function is not None
    aggregates = [_aggregate(c) for c in node.function.columns]
    grouped = stream.frame.groupBy(F.col(KEY), window.alias("__w")).agg(*aggregates)
    names = [n for n in grouped.columns if n not in (KEY, "__w")]
    frame = grouped.select(
        *key_columns(stream),
        F.col("__w.start").alias("window_start"),
        F.col("__w.end").alias("window_end"),
        *[F.col(f"`{n}`") for n in names],
        F.window_time(F.col("__w")).alias(TS),
        F.col(KEY),
    )
    try:
        frame.schema  # noqa: B018 - analyse now so a bad aggregate names this operator
    except Exception as exc:
        raise GraphError(f"{node.label}: {exc}") from exc
    return Stream.of(frame, key_fields=stream.key_fields, watermarked=True, stateful=True)


def key_columns(stream: Stream) -> list[Column]:
    """The key as output fields: the key field(s) by name, or `key` for a selector key."""
    from pyspark.sql import functions as F

    fields = stream.key_fields or ()
    if not fields:
        return [F.col(KEY).alias("key")]
    if len(fields) == 1:
        return [F.col(KEY).alias(fields[0])]
    return [F.col(f"{KEY}.`{f}`").alias(f) for f in fields]


def _aggregate(value: object) -> Column:
    from pyspark.sql import functions as F

    return F.expr(value) if isinstance(value, str) else value  # type: ignore[return-value]
