"""What one epoch's sink tasks need to know, decided on the driver and shipped to executors (picklable).

A *query* is one Spark streaming query; it writes one or more sinks (`SinkOutput`). With several, each row names
its sink in the `SINK_INDEX_COLUMN` column and every task commits the records of all of them in one transaction.
Transactional ids, progress markers and the Spark checkpoint folder are named after the query (a query with one
sink is named after that sink).
"""

from __future__ import annotations

from dataclasses import dataclass

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.encoding import SinkOutput
from ethereal_kafka.eos.names import transactional_id


@dataclass(frozen=True)
class TaskSlot:
    """The identity of one sink task: its transactional id and where its epoch marker lives.

    Attributes:
        name: `{topic}-{partition}` (partition-preserving: the input partition) or the sink task number.
        marker_group: Consumer group that holds the marker.
        marker_topic, marker_partition: The offset the marker is committed to.
        marker_offset: The offset value committed (the input end offset, or `epoch + 1` for progress markers).
        start_offset: Partition-preserving: the input range's start (with `marker_offset`, the range whose dead
            letters the task commits; see `eos.dead_letters`); -1 otherwise.
    """

    name: str
    marker_group: str
    marker_topic: str
    marker_partition: int
    marker_offset: int
    start_offset: int = -1


@dataclass(frozen=True)
class EpochWrite:
    """Everything a sink task of epoch `epoch` needs.

    Attributes:
        query: The query's name (part of transactional ids).
        outputs: The sinks the query writes; rows choose one by `SINK_INDEX_COLUMN` when there are several. All
            share one cluster (checked when the query is built), whose connection settings `sink` gives.
        slots: Task i of the epoch's write uses `slots[i]`.
        instance_id: This run of the job; a task that finds another instance's claim stops (FencedError).
        dead_letter_topic: Partition-preserving under `on.error=dlq`: where the task commits the dead letters the
            read of its range left (`dead_letters.take`); None otherwise.
    """

    app_id: str
    instance_id: str
    checkpoint_id: str
    epoch: int
    query: str
    outputs: tuple[SinkOutput, ...]
    slots: tuple[TaskSlot, ...]
    transaction_timeout_ms: int
    dead_letter_topic: str | None = None

    @property
    def sink(self) -> KafkaSinkConfig:
        """The first sink's connector: its bootstrap servers and `kafka.*` settings serve every output."""
        return self.outputs[0].config

    def transactional_id(self, slot: TaskSlot) -> str:
        """The transactional id of `slot`."""
        return transactional_id(self.app_id, self.query, slot.name)
