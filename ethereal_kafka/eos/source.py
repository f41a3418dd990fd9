"""The Kafka source as the exactly-once runner registers it: the plain connector, whose read tasks hand the dead
letters they keep for their epoch (`dlq.delivery=epoch`) to the protocol (`eos.dead_letters.leave`).

`runtime.spark` registers `ExactlyOnceKafkaSource` under the connector's format name (`ethereal-kafka`), so every
job reads through it; only a source with `dlq.delivery=epoch` (set by the runner under exactly-once) keeps dead
letters, and only then does the hook run.
"""

from __future__ import annotations

from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter
from ethereal_kafka.connectors.kafka.source import KafkaDataSource, KafkaInputPartition, KafkaStreamReader
from ethereal_kafka.eos.dead_letters import DeadLetterReport, leave


class ExactlyOnceStreamReader(KafkaStreamReader):
    """The connector's reader; kept dead letters go to the epoch's commit (see the module docstring)."""

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
    """`format("ethereal-kafka")` as the runner registers it (see the module docstring)."""

    reader_class = ExactlyOnceStreamReader
