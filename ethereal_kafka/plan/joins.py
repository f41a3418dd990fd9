"""Compile two-input joins: windowed joins (inner, left, right, full, semi, anti) and interval joins.

Which engine runs what (see docs/operators-joins.md for the semantics each one has):

- **Spark-native stream-stream joins** for windowed inner / left / right / full outer / semi joins over tumbling or
  sliding windows: each side gets its event-time window (`window(__ts, ...)`; a sliding window gives a row per
  window it belongs to), and the sides are joined on key equality plus window equality, with the watermarks of both
  inputs. Spark then, in epoch N: drops a (row, window) whose window ended at or before the *previous* epoch's
  watermark; emits every pair as soon as both rows have arrived (a semi join: the left row, once, at its first
  match); and evicts the windows that end at or before epoch N's watermark, emitting their unmatched rows of an
  outer join (null-padded) in that epoch.
- **Interval joins** are native inner joins on key equality plus `left.ts + lower <= right.ts <= left.ts + upper`
  over the keyed streams' event time: a row at or behind the previous epoch's watermark is dropped; every pair of
  the other rows is emitted as soon as both have arrived.
- **The framework's join operator** (`plan.operators.join`, on transformWithState) for what Spark lacks: anti joins
  (left rows of a window without a right match, emitted when the window closes) and joins over session windows.

Output elements: `function(left, right)` (Spark DDL `output_type`; the missing side of an outer row is None, semi and
anti joins pass `right=None`) or, by default, the left fields, the right fields (a right field whose name the left
has gets the prefix `right_`; none for semi/anti), then `window_start`/`window_end` for windowed joins. The output
keeps the join key in `__key` (a sink's record key) but is not keyed: call `key_by` again to key it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.windows import SlidingEventTimeWindows, TumblingEventTimeWindows
from ethereal_kafka.plan.context import CompileContext, register
from ethereal_kafka.plan.join_shapes import LEFT, RIGHT, element, finish, key_pair
from ethereal_kafka.plan.schema import KEY, TS
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql import Column

#: Spark's join type for each natively run windowed join kind.
NATIVE = {
    "inner": "inner",
    "left": "left_outer",
    "right": "right_outer",
    "full": "full_outer",
    "semi": "left_semi",
}


def runs_native(node: g.JoinNode) -> bool:
    """True when Spark's own stream-stream join has the API's semantics for `node` (see the module docstring)."""
    if node.window is None:
        return True
    return node.how in NATIVE and isinstance(node.window, TumblingEventTimeWindows | SlidingEventTimeWindows)


@register(g.JoinNode)
def compile_join(ctx: CompileContext, node: g.JoinNode, inputs: list[Stream]) -> Stream:
    """Dispatch a join to the native or the framework engine (see the module docstring).

    Raises:
        GraphError: an input without event time, missing key fields, a function without `output_type`, field
            names that clash in the default output, or a window the joins do not support.
    """
    left, right = inputs
    for side, stream in (("left", left), ("right", right)):
        if not stream.watermarked or TS not in stream.frame.columns:
            raise GraphError(
                f"{node.label}: the {side} input has no event time; joins pair elements by event time: call "
                "assign_timestamps_and_watermarks on both inputs"
            )
    if node.function is not None and not node.output_type:
        raise GraphError(
            f"{node.label}: a join function needs output_type, the Spark DDL of its elements "
            "(e.g. .apply(fn, output_type='order_id long, latency_ms long'))"
        )
    if node.window is None:
        return _interval(node, left, right)
    if runs_native(node):
        return _native_window(node, left, right)
    from ethereal_kafka.plan.operators.join import compile_framework_join

    return compile_framework_join(ctx, node, left, right)


# -- native windowed joins --------------------------------------------------------------------------------------
def _window(node: g.JoinNode) -> Column:
    from pyspark.sql import functions as F

    assigner = node.window
    if isinstance(assigner, SlidingEventTimeWindows):
        return F.window(
            F.col(TS),
            assigner.size.spark_interval(),
            assigner.slide.spark_interval(),
            startTime=assigner.offset.spark_interval(),
        )
    assert isinstance(assigner, TumblingEventTimeWindows)
    return F.window(F.col(TS), assigner.size.spark_interval(), startTime=assigner.offset.spark_interval())


def _native_window(node: g.JoinNode, left: Stream, right: Stream) -> Stream:
    from pyspark.sql import functions as F

    lkey, rkey = key_pair(node, left, right)
    # Only the window keeps the watermark (Spark allows one event-time column per input): it bounds the state
    # (windows ending at the watermark are evicted) and decides which rows are late.
    lframe = left.frame.select(element(left).alias(LEFT), lkey.alias("__lk"), _window(node).alias("__lw"))
    rframe = right.frame.select(element(right).alias(RIGHT), rkey.alias("__rk"), _window(node).alias("__rw"))
    condition = (F.col("__lk") == F.col("__rk")) & (F.col("__lw") == F.col("__rw"))
    joined = lframe.join(rframe, condition, NATIVE[node.how])
    if node.how == "full":
        window = F.coalesce(F.col("__lw"), F.col("__rw"))
        stamp = F.timestamp_micros(F.unix_micros(window.getField("end")) - 1000)
        key = F.coalesce(F.col("__lk"), F.col("__rk"))
    else:
        name = "__rw" if node.how == "right" else "__lw"
        window = F.col(name)
        stamp = F.window_time(F.col(name))
        key = F.col("__rk" if node.how == "right" else "__lk")
    sides = [F.col(LEFT)] if node.how == "semi" else [F.col(LEFT), F.col(RIGHT)]
    frame = joined.select(
        *sides,
        window.getField("start").alias("window_start"),
        window.getField("end").alias("window_end"),
        stamp.alias(TS),
        key.alias(KEY),
    )
    return finish(node, frame, left, right)


# -- interval joins ---------------------------------------------------------------------------------------------
def _interval(node: g.JoinNode, left: Stream, right: Stream) -> Stream:
    from pyspark.sql import functions as F

    assert node.lower is not None and node.upper is not None
    lkey, rkey = key_pair(node, left, right)
    lframe = left.frame.select(element(left).alias(LEFT), lkey.alias("__lk"), F.col(TS).alias("__lts"))
    rframe = right.frame.select(element(right).alias(RIGHT), rkey.alias("__rk"), F.col(TS).alias("__rts"))
    lts, rts = F.col("__lts"), F.col("__rts")
    low, high = _shift(lts, node.lower), _shift(lts, node.upper)
    condition = (
        (F.col("__lk") == F.col("__rk"))
        & (rts >= low if node.lower_inclusive else rts > low)
        & (rts <= high if node.upper_inclusive else rts < high)
    )
    joined = lframe.join(rframe, condition, "inner")
    frame = joined.select(F.col(LEFT), F.col(RIGHT), F.greatest(lts, rts).alias(TS), F.col("__lk").alias(KEY))
    return finish(node, frame, left, right)


def _shift(ts: Column, ms: int) -> Column:
    from pyspark.sql import functions as F

    interval = F.expr(f"INTERVAL {abs(ms)} MILLISECONDS")
    return ts - interval if ms < 0 else ts + interval
