"""Spark helpers for tests: run the Kafka source to completion into a memory table and collect the rows."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession
    from pyspark.sql.streaming import StreamingQuery


def read_source_available(
    spark: SparkSession, options: Mapping[str, str], checkpoint: Path, timeout_s: float = 180.0
) -> tuple[list[Row], list[dict[str, Any]]]:
    """Run `format("ethereal-kafka")` with `options` under `availableNow` into a Parquet folder beside
    `checkpoint`, and read the folder back. Calling it again with the same checkpoint resumes the query (the
    returned rows then include earlier runs' rows).

    Returns:
        The rows read and the query's progress reports (one per epoch).
    """
    output = checkpoint.parent / f"{checkpoint.name}-output"
    frame = spark.readStream.format("ethereal-kafka").options(**options).load()
    query: StreamingQuery = (
        frame.writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        if not query.awaitTermination(int(timeout_s)):
            raise TimeoutError(f"source query did not finish within {timeout_s} s")
        exc = query.exception()
        if exc is not None:
            raise exc
        rows = spark.read.schema(frame.schema).parquet(str(output)).collect()
        return rows, list(query.recentProgress)
    finally:
        query.stop()
