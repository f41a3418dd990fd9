"""What one epoch's sink tasks need to know, decided on the driver and shipped to executors (picklable).

A *query* is one Spark streaming query; it writes one or more sinks (`SinkOutput`). With several, each row names
its sink in the `SINK_INDEX_COLUMN` column and every task commits the records of all of them in one transaction.
Transactional ids, progress markers and the Spark checkpoint folder are named after the query (a query with one
sink is named after that sink).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ethereal_kafka.checkpoint.spark_log import CheckpointLogError, epoch_end_offsets
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.connectors.kafka.encoding import SinkOutput
from ethereal_kafka.connectors.kafka.offsets import Offsets
from ethereal_kafka.connectors.kafka.source import pinned_initial_offsets
from ethereal_kafka.eos.markers import ranges_digest
from ethereal_kafka.eos.names import transactional_id


@dataclass(frozen=True)
class EpochRanges:
    """What epoch N of a query reads: each input partition's start and end offset, from Spark's offset log
    (`offsets/N`, and `offsets/N-1` or the sources' pinned initial offsets for the starts).

    Attributes:
        starts: Where each partition's range starts (empty when unknown: a purged or foreign log).
        ends: Where each partition's range ends (exclusive), over every source of the query.
        per_source: The end offsets as Spark logged them, one per source line.
    """

    starts: Offsets
    ends: Offsets
    per_source: tuple[Offsets, ...]

    @property
    def digest(self) -> str:
        """The digest an epoch marker carries (`markers.ranges_digest`)."""
        return ranges_digest(self.starts, self.ends)

    @classmethod
    def of(cls, location: str, epoch: int, sources: Iterable[KafkaSourceConfig]) -> EpochRanges:
        """Epoch `epoch` of the query whose Spark checkpoint is `location`, reading `sources`.

        Raises:
            CheckpointLogError: `offsets/<epoch>` is missing or malformed.
        """
        per_source = tuple(epoch_end_offsets(location, epoch))
        previous: list[Offsets] = []
        if epoch > 0:
            try:
                previous = epoch_end_offsets(location, epoch - 1)
            except CheckpointLogError:
                previous = []
        else:
            previous = [pinned for s in sources if (pinned := pinned_initial_offsets(s)) is not None]
        return cls(Offsets().merged(*previous), Offsets().merged(*per_source), per_source)


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
        ranges: The digest of the epoch's input ranges its markers carry (`EpochRanges.digest`).
        dead_letter_topic: Partition-preserving under `on.error=dlq`: where the task commits the dead letters the
            read of its range left (`dead_letters.take`); None otherwise.
        user_dead_letters: Partition-preserving under `on.user.error=dlq`: the task also commits the dead letters
            of user-code errors its operators left (`dead_letters.take_user`; each names its topic).
    """

    app_id: str
    instance_id: str
    checkpoint_id: str
    epoch: int
    ranges: str
    query: str
    outputs: tuple[SinkOutput, ...]
    slots: tuple[TaskSlot, ...]
    transaction_timeout_ms: int
    dead_letter_topic: str | None = None
    user_dead_letters: bool = False

    @property
    def sink(self) -> KafkaSinkConfig:
        """The first sink's connector: its bootstrap servers and `kafka.*` settings serve every output."""
        return self.outputs[0].config

    def transactional_id(self, slot: TaskSlot) -> str:
        """The transactional id of `slot`."""
        return transactional_id(self.app_id, self.query, slot.name)
