"""Which watermarks of a query carry their inputs' event time across restarts, and the plan that carries it.

A query with two or more watermarked inputs under Spark's min policy (no input declares `with_idleness`) needs it:
Spark keeps each input's watermark in memory only, so after a restart an input with nothing new would hold the
query's watermark back (see `connectors.event_time` for the mechanism and why it is exact on replays). A query with
one watermarked input, or under the max policy, resumes exactly from Spark's checkpoint and gets nothing extra.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ethereal_kafka.api import graph as g
from ethereal_kafka.connectors.event_time import CARRIER_COLUMN, FORMAT, observed_name
from ethereal_kafka.plan.schema import TS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def carried_watermarks(sinks: Iterable[g.Node]) -> tuple[int, ...]:
    """Ids of the watermark nodes upstream of `sinks` that carry event time across restarts (sorted; empty when the
    query has fewer than two or one of them declares idleness)."""
    found = [n for n in g.upstream(*sinks) if isinstance(n, g.WatermarkNode)]
    if len(found) < 2 or any(n.strategy.idleness is not None for n in found):
        return ()
    return tuple(sorted(n.id for n in found))


def carrier_frame(spark: SparkSession, query_checkpoint: str, node_id: int, schema: StructType) -> DataFrame:
    """The carrier source of watermark node `node_id` of the query whose Spark checkpoint folder is
    `query_checkpoint`, with the input's `schema` (`connectors.event_time`)."""
    return (
        spark.readStream.format(FORMAT)
        .option("checkpoint", query_checkpoint)
        .option("node", str(node_id))
        .option("schema", schema.json())
        .load()
    )


def carried_watermark(frame: DataFrame, node_id: int, carrier: DataFrame, delay: str) -> DataFrame:
    """`frame.withWatermark(TS, delay)` whose input also holds `carrier`'s row (the largest event time read in
    earlier epochs), observed as `observed_name(node_id)`; the carrier row is dropped after the watermark.

    The order matters. The watermark sits right on the union, and the observation (Spark's `CollectMetrics`, which
    its optimizer never pushes a filter through) between the watermark and the filter: filters Spark infers later
    (`order_id IS NOT NULL` for a join key) stop above the observation instead of dropping the carrier row before
    the watermark counted it. A data row without event time is kept.
    """
    from pyspark.sql import functions as F

    carried = carrier.select(
        *[F.col(f"`{name}`") for name in frame.columns], F.lit(True).alias(CARRIER_COLUMN)
    )
    both = frame.withColumn(CARRIER_COLUMN, F.lit(False)).union(carried)
    marked = both.withWatermark(TS, delay)
    observed = marked.observe(observed_name(node_id), F.max(F.unix_micros(F.col(TS))).alias("max"))
    earliest = F.lit("0001-01-01 00:00:00").cast("timestamp")
    return observed.filter(~(F.col(CARRIER_COLUMN) & (F.col(TS) >= earliest))).drop(CARRIER_COLUMN)
