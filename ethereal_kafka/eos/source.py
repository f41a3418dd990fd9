"""The Kafka source as the exactly-once runner registers it: the plain connector, whose read tasks hand the dead
letters they keep for their epoch (`dlq.delivery=epoch`) to the protocol (`eos.dead_letters.leave`).

`runtime.spark` registers `ExactlyOnceKafkaSource` under the connector's format name (`ethereal-kafka`), so every
job reads through it; only a source with `dlq.delivery=epoch` (set by the runner under exactly-once) keeps dead
letters, and only then does the hook run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter
from ethereal_kafka.connectors.kafka.decoding import SourceLayout
from ethereal_kafka.connectors.kafka.source import KafkaDataSource, KafkaInputPartition, KafkaStreamReader
from ethereal_kafka.eos.chained import CHAINED_OPTION, chained_task
from ethereal_kafka.eos.dead_letters import DeadLetterReport, leave
from ethereal_kafka.eos.phase_one import RESULT_SCHEMA


class ExactlyOnceStreamReader(KafkaStreamReader):
    """The connector's reader; kept dead letters go to the epoch's commit (see the module docstring). With
    `chained` (a query's name), each read task is that chained query's sink task (`eos.chained`)."""

    def __init__(self, layout: SourceLayout, chained: str | None = None) -> None:
        super().__init__(layout)
        self.chained = chained

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "chained": self.chained}

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's batches; for a chained query, its summary row once the range's output is committed."""
        if self.chained is None:
            return super().read(partition)
        assert isinstance(partition, KafkaInputPartition)
        return chained_task(self.chained, partition, super().read(partition))

    def keep_dead_letters(self, partition: KafkaInputPartition, letters: list[DeadLetter]) -> None:
        """Leave the range's dead letters for its epoch's commit (`eos.dead_letters.leave`; runs on the executor)."""
        leave(
            DeadLetterReport(
                self.config.group,
                partition.topic,
                partition.partition,
                partition.start,
                partition.until,
                tuple(letters),
            )
        )


class ExactlyOnceKafkaSource(KafkaDataSource):
    """`format("ethereal-kafka")` as the runner registers it (see the module docstring); with the option
    `CHAINED_OPTION`, the source of a chained query, whose rows are its sink tasks' summaries."""

    reader_class = ExactlyOnceStreamReader

    def _chained(self) -> str | None:
        return dict(self.options).get(CHAINED_OPTION)

    def _properties(self) -> dict[str, str]:
        return {k: v for k, v in dict(self.options).items() if k != CHAINED_OPTION}

    def schema(self) -> StructType:
        """The connector's columns, or a chained query's summary rows (`phase_one.RESULT_SCHEMA`)."""
        return RESULT_SCHEMA if self._chained() is not None else super().schema()

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The micro-batch reader (driver side); a chained query's reads write (`eos.chained`)."""
        return ExactlyOnceStreamReader(self._layout(), self._chained())
