"""What one epoch's sink tasks need to know, decided on the driver and shipped to executors (picklable)."""

from __future__ import annotations

from dataclasses import dataclass

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.serde import SerdeSpec

PARTITION_PRESERVING = "partition-preserving"
SHUFFLING = "shuffling"


def progress_topic(app_id: str) -> str:
    """The internal topic whose partitions carry shuffling jobs' epoch markers and the instance claim."""
    return f"{app_id}.ethereal-progress"


def transactional_id(app_id: str, sink: str, task_name: str) -> str:
    """`{app.id}-{sink}-{task}`: stable across restarts, one live writer per id."""
    return f"{app_id}-{sink}-{task_name}"


@dataclass(frozen=True)
class TaskSlot:
    """The identity of one sink task: its transactional id and where its epoch marker lives.

    Attributes:
        name: `{topic}-{partition}` (partition-preserving: the input partition) or the sink task number.
        marker_group: Consumer group that holds the marker.
        marker_topic, marker_partition: The offset the marker is committed to.
        marker_offset: The offset value committed (the input end offset, or `epoch + 1` for progress markers).
    """

    name: str
    marker_group: str
    marker_topic: str
    marker_partition: int
    marker_offset: int


@dataclass(frozen=True)
class EpochPlan:
    """Everything a sink task of epoch `epoch` needs.

    Attributes:
        slots: Task i of the epoch's write uses `slots[i]`.
        instance_id: This run of the job; a task that finds another instance's claim stops (FencedError).
    """

    app_id: str
    instance_id: str
    checkpoint_id: str
    epoch: int
    sink: KafkaSinkConfig
    key_spec: SerdeSpec
    value_spec: SerdeSpec
    mode: str
    slots: tuple[TaskSlot, ...]
    transaction_timeout_ms: int

    def transactional_id(self, slot: TaskSlot) -> str:
        """The transactional id of `slot`."""
        return transactional_id(self.app_id, self.sink.name, slot.name)
