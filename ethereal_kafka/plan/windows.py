"""Compile keyed windows: Spark-native where Spark's semantics are the API's, the framework's operator otherwise.

Spark-native (`groupBy(key, window(...)).agg(...)` / `session_window`, append mode): tumbling, sliding and
session windows (without a max length) computed with Spark aggregate expressions (`agg`, `count`, `sum`), without
allowed lateness, a late-data side output or a custom trigger. Spark then drops records behind the previous
epoch's watermark and emits each window once, when the watermark passes its end.

Everything else — Python `aggregate`/`reduce`/`process`, count and global windows, triggers, allowed lateness with
late firings, late-data side outputs, session max length — runs on the framework's window operator
(`plan.operators.window`, on Spark's transformWithState).

Output fields: the key field(s) (`key` for a selector key), `window_start`, `window_end` (timestamps; not for
count/global windows), then the aggregate's fields. `__ts` becomes the window's last instant (framework: `end - 1
ms`; native: Spark's `window_time`, `end - 1 µs`, which keeps the watermark so a native window may follow).

Chains (measured, see docs/operators-windows.md): an event-time window may follow another stateful operator of the
same query only when both are Spark-native; count windows and count-triggered global windows may follow anything.
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
from ethereal_kafka.plan.context import CompileContext, register
from ethereal_kafka.plan.schema import KEY, TS
from ethereal_kafka.plan.stream import Stream, key_columns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The column metadata by which Spark recognizes an event-time column (`EventTimeWatermark.delayKey`).
WATERMARK_DELAY = "spark.watermarkDelayMs"


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
    native = runs_native(node)
    _check_chain(node, stream, native)
    if node.assigner is not None and node.assigner.event_time and not stream.watermarked:
        raise GraphError(
            f"{node.label}: event-time windows need event time: call assign_timestamps_and_watermarks before key_by"
        )
    if native:
        return _native(ctx, node, stream)
    try:
        from ethereal_kafka.plan.operators.window import compile_framework_window
    except ModuleNotFoundError as exc:
        raise GraphError(
            f"{node.label}: this window needs the framework's window operator, not available"
        ) from exc
    return compile_framework_window(ctx, node, stream)


def _check_chain(node: g.WindowNode, stream: Stream, native: bool) -> None:
    """Refuse an event-time window behind another stateful operator of the same query where it cannot be right.

    Measured on Spark 4.3: a Spark-native window after a Spark-native window works (Spark delays the second one's
    watermark). The framework's operator applies the epoch's watermark before the epoch's rows ("watermark
    first"), so the results of an upstream window, emitted exactly when the watermark passes their end, would all
    arrive late at it; and a framework window's output carries no watermark for a native window to use. Count and
    global windows with count triggers do not use the watermark and may follow any operator.
    """
    if not stream.stateful:
        return
    event_time = bool(node.assigner is not None and node.assigner.event_time) or _fires_on_time(node.trigger)
    if not event_time:
        return
    if native and stream.watermarked:
        return
    raise GraphError(
        f"{node.label}: an event-time window cannot follow another stateful operator in the same query here "
        "(the upstream results reach it only after the watermark passed them); only a Spark-native window "
        "(agg/count/sum, no lateness, side output or trigger) may follow a Spark-native window. Write the first "
        "operator's output to a topic and window that topic, or use a count window"
    )


def _fires_on_time(trigger: object) -> bool:
    from ethereal_kafka.api.windows import ContinuousEventTimeTrigger, PurgingTrigger

    while isinstance(trigger, PurgingTrigger):
        trigger = trigger.inner
    return isinstance(trigger, ContinuousEventTimeTrigger | EventTimeTrigger)


def _native(ctx: CompileContext, node: g.WindowNode, stream: Stream) -> Stream:
    from pyspark.sql import functions as F

    assigner = node.assigner
    ts = F.col(TS)
    # Spark wants a start time below the slide; an offset of a whole number of slides changes nothing.
    if isinstance(assigner, TumblingEventTimeWindows):
        start = f"{assigner.offset.millis % assigner.size.millis} milliseconds"
        window = F.window(ts, assigner.size.spark_interval(), startTime=start)
    elif isinstance(assigner, SlidingEventTimeWindows):
        start = f"{assigner.offset.millis % assigner.slide.millis} milliseconds"
        window = F.window(
            ts, assigner.size.spark_interval(), assigner.slide.spark_interval(), startTime=start
        )
    else:
        assert isinstance(assigner, EventTimeSessionWindows)
        window = F.session_window(ts, assigner.gap.spark_interval())
    assert node.function is not None
    aggregates = [_aggregate(c) for c in node.function.columns]
    grouped = _event_time(stream.frame, node).groupBy(F.col(KEY), window.alias("__w")).agg(*aggregates)
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


def watermark_settings(sinks: tuple[g.SinkNode, ...]) -> dict[str, str]:
    """Session settings a query needs for its watermarks: when an input of the query declares `with_idleness`,
    Spark's `multipleWatermarkPolicy=max`, so a quiet input cannot hold back the query's watermark (a single input
    never needs it: its watermark already follows its most advanced partition)."""
    if any(isinstance(n, g.WatermarkNode) and n.strategy.idleness is not None for n in g.upstream(*sinks)):
        return {"spark.sql.streaming.multipleWatermarkPolicy": "max"}
    return {}


def _event_time(frame: DataFrame, node: g.WindowNode) -> DataFrame:
    """`frame` with `__ts` marked as Spark event time again when a Python step (mapInArrow) between the watermark
    and the window made a new column of it: Spark's window aggregation looks for the watermark's marker on its time
    column. Only the marker is restored (Spark refuses a second watermark): the watermark itself stays the one of
    `assign_timestamps_and_watermarks`, which saw every record, including those a Python filter then dropped."""
    from pyspark.sql import functions as F

    if WATERMARK_DELAY in frame.schema[TS].metadata:
        return frame
    bounds = [
        n.strategy.out_of_orderness.millis for n in g.upstream(*node.inputs) if isinstance(n, g.WatermarkNode)
    ]
    marker = {WATERMARK_DELAY: max(bounds, default=0)}
    return frame.withColumn(TS, F.col(TS).alias(TS, metadata=marker))


def _aggregate(value: object) -> Column:
    from pyspark.sql import functions as F

    return F.expr(value) if isinstance(value, str) else value  # type: ignore[return-value]
