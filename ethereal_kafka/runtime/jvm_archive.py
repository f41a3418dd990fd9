"""The workload the Spark class archive is made from (`runtime.jvm`), run in a child Python by `build_archive`:

python -m ethereal_kafka.runtime.jvm_archive ARCHIVE_PATH
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from ethereal_kafka.runtime.jvm import OPTIONS_KEY


def workload(dump_to: str) -> None:
    """What the archive is made from: a local session running the kinds of queries jobs run (a Python streaming
    source, a watermarked aggregation on the RocksDB state store, a Python `mapInArrow` stage, `foreachBatch`)."""
    import tempfile

    from pyspark import SparkContext
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from ethereal_kafka.runtime.spark import local_session

    class Numbers(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ethereal-kafka-warmup"

        def schema(self) -> str:
            return "n long, ts timestamp"

        def streamReader(self, schema: object) -> DataSourceStreamReader:
            return NumbersReader()

    class NumbersReader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def latestOffset(self, start: dict[str, int], limit: object) -> dict[str, int]:
            return {"n": 300}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition((start["n"], end["n"]))]

        def read(self, partition: InputPartition) -> Iterator[tuple[int, object]]:
            import datetime

            low, high = partition.value
            for n in range(low, high):
                yield (n, datetime.datetime.fromtimestamp(n, tz=datetime.UTC))

    spark = local_session("ethereal-kafka-warmup", conf={OPTIONS_KEY: f"-XX:ArchiveClassesAtExit={dump_to}"})
    spark.dataSource.register(Numbers)
    gateway = SparkContext._gateway
    with tempfile.TemporaryDirectory() as scratch:
        frame = spark.readStream.format("ethereal-kafka-warmup").load()
        counts = (
            frame.withWatermark("ts", "10 seconds")
            .groupBy(F.window("ts", "5 seconds"))
            .agg(F.count("n").alias("c"), F.sum("n").alias("s"))
        )
        doubled = counts.mapInArrow(lambda batches: iter(list(batches)), counts.schema)
        seen: list[int] = []
        query = (
            doubled.writeStream.foreachBatch(lambda df, _epoch: seen.append(len(df.collect())))
            .option("checkpointLocation", f"{scratch}/ckpt")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        spark.range(1000).selectExpr("id % 7 as k").groupBy("k").count().collect()
    proc = getattr(gateway, "proc", None)
    spark.stop()
    if proc is not None:  # the JVM writes the archive as it exits: wait for it
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=300)


if __name__ == "__main__":  # pragma: no cover - run by build_archive in a child process
    workload(sys.argv[1])
