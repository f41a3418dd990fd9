"""How a shuffling query's rows reach its sink tasks: hash-partitioned by key over exactly `sink.tasks` Spark
partitions and sorted inside each, so a replayed epoch sends the same rows to the same task in the same order (the
exactly-once protocol's partitioning rule: never round-robin, never coalesce before the sink).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ethereal_kafka.connectors.kafka.encoding import SINK_INDEX_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Columns giving a row's place in its key's order, best first: a framework operator's emission sequence, the
#: source position a DataStream element carries, or a DataFrame's `offset` column.
_POSITIONS: tuple[tuple[str, ...], ...] = (("__seq",), ("__part", "__off"), ("offset",))


def hash_partitioned(batch: DataFrame, tasks: int, sinks: list[tuple[str, int | None]]) -> DataFrame:
    """Rows over exactly `tasks` Spark partitions, sorted inside each, so what reaches sink task p on a replay is
    what reached it the first time, in the same order.

    Args:
        sinks: Per sink of the query (in `__sink` index order), its key column and its fixed topic's partition
            count (None when rows name their topic).

    With fixed sink topics (and no `partition` column of the user's), each row's Kafka partition is computed here
    from its key (Spark's murmur3 `hash`) and rows are grouped by (sink, partition): every Kafka partition is
    written by exactly one task, and epochs commit in order, so each output partition receives the same records
    in the same order on every replay.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType

    frame = batch
    multi = len(sinks) > 1 and SINK_INDEX_COLUMN in frame.columns
    if "partition" not in frame.columns:
        choices = [
            (i, F.pmod(F.hash(F.col(key)), F.lit(count)))
            for i, (key, count) in enumerate(sinks)
            if count and key in frame.columns
        ]
        if multi and choices:
            expr = None
            for i, chosen in choices:
                expr = (F if expr is None else expr).when(F.col(SINK_INDEX_COLUMN) == i, chosen)
            frame = frame.withColumn("partition", expr)  # type: ignore[arg-type]
        elif not multi and choices:
            frame = frame.withColumn("partition", choices[0][1])
    orderable = [f.name for f in frame.schema.fields if not isinstance(f.dataType, MapType | ArrayType)]
    key_column = sinks[0][0]
    if "partition" in frame.columns:
        by = [SINK_INDEX_COLUMN, "partition"] if multi else ["partition"]
    elif multi:
        by = [SINK_INDEX_COLUMN]
    else:
        by = [key_column if key_column in frame.columns else orderable[0]]
    first = [c for c in by if c in orderable]
    # Within a key, rows keep the order they were emitted or read in (a framework operator's `__seq`, else the
    # source position), not the order of their values; the other columns only break ties, for determinism.
    key_first = [c for c in (key_column,) if c in orderable and c not in first]
    position = next((cols for cols in _POSITIONS if all(c in orderable for c in cols)), ())
    then = [*first, *key_first, *[c for c in position if c not in first]]
    return frame.repartition(tasks, *by).sortWithinPartitions(*then, *[c for c in orderable if c not in then])
