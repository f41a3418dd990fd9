"""Which watermarks of a query carry their inputs' event time across restarts, and the plan that carries it.

A query with two or more watermarked inputs under Spark's min policy (no input declares `with_idleness`) needs it:
Spark keeps each input's watermark in memory only, so after a restart an input with nothing new would hold the
query's watermark back (see `connectors.event_time` for the mechanism and why it is exact on replays). A query with
one watermarked input, or under the max policy, resumes exactly from Spark's checkpoint and gets nothing extra.

Each carried watermark is known in the checkpoint by its carry key (`carry_key`), never by its place in the graph:
its `.uid()` when the pipeline gave one, else the sources it reads and the field (or assigner) its event time comes
from. A new version of the job that adds operators before its watermarks, or builds them in another order, resumes
each input from its own event time; one that changes a carried watermark's input or timestamp without a uid is
refused at start (`connectors.event_time.prepare_carry`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ethereal_kafka.api import graph as g
from ethereal_kafka.connectors.event_time import CARRIER_COLUMN, FORMAT, observed_name
from ethereal_kafka.plan.schema import TS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def carried_watermarks(sinks: Iterable[g.Node], restoring: bool = False) -> tuple[tuple[int, str, int], ...]:
    """`(node id, carry key, out-of-orderness bound ms)` of each watermark node upstream of `sinks` that carries
    event time across restarts (sorted by id; empty when the query has fewer than two or one of them declares
    idleness). `restoring`: the start restores a savepoint into a new checkpoint, whose first epoch would run with
    watermark 0: every watermark carries (`runtime.savepoint`)."""
    found = sorted((n for n in g.upstream(*sinks) if isinstance(n, g.WatermarkNode)), key=lambda n: n.id)
    if not restoring and (len(found) < 2 or any(n.strategy.idleness is not None for n in found)):
        return ()
    marks = [(n.uid, _sources(n), timestamp_name(n)) for n in found]
    keys = carry_keys(marks)
    return tuple((n.id, key, n.strategy.out_of_orderness.millis) for n, key in zip(found, keys, strict=True))


def carry_key(uid: str | None, sources: Iterable[str], timestamp: str) -> str:
    """The name a carried watermark's event time has in the checkpoint: `uid:<uid>` when the pipeline gave one,
    else `input:<source>+<source>@<timestamp>` (the sources it reads, sorted, and `timestamp_name`)."""
    if uid is not None:
        return f"uid:{uid}"
    return f"input:{'+'.join(sorted(set(sources))) or '?'}@{timestamp}"


def carry_keys(marks: Sequence[tuple[str | None, Iterable[str], str]]) -> list[str]:
    """`carry_key` of each of a query's carried watermarks, `(uid, sources, timestamp)` in graph order; watermarks
    that would share a key (no uid, same sources and timestamp) are told apart by their order among those, `#2`,
    `#3`: give them uids to keep them apart whatever the order."""
    keys = [carry_key(*mark) for mark in marks]
    seen: dict[str, int] = {}
    out = []
    for key in keys:
        seen[key] = seen.get(key, 0) + 1
        out.append(key if seen[key] == 1 else f"{key}#{seen[key]}")
    return out


def timestamp_name(node: g.WatermarkNode) -> str:
    """Where a watermark's event time comes from: its timestamp field, or its assigner's `module.qualname`."""
    assigner = node.strategy.timestamp_assigner
    if assigner is None:
        return node.strategy.timestamp_field
    name = getattr(assigner, "__qualname__", None) or type(assigner).__qualname__
    return f"{getattr(assigner, '__module__', None) or '?'}.{name}".replace("<locals>.", "")


def _sources(node: g.Node) -> list[str]:
    """The source names `node` reads, transitively."""
    return [n.source for n in g.upstream(node) if isinstance(n, g.SourceNode)]


def carrier_frame(spark: SparkSession, query_checkpoint: str, key: str, schema: StructType) -> DataFrame:
    """The carrier source of the watermark whose carry key is `key`, of the query whose Spark checkpoint folder is
    `query_checkpoint`, with the input's `schema` (`connectors.event_time`)."""
    return (
        spark.readStream.format(FORMAT)
        .option("checkpoint", query_checkpoint)
        .option("node", key)
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
