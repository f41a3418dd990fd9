"""Build one epoch's sink-task description by hand and run a task attempt on it (no Spark), for the sink task tests."""

from __future__ import annotations

import pyarrow as pa

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.encoding import SinkOutput
from ethereal_kafka.eos.phase_one import TransactionalTask
from ethereal_kafka.eos.task_plan import EpochWrite, TaskSlot
from ethereal_kafka.serde import SerdeSpec

#: The input end offset the marker commits (a partition-preserving task's marker is its input partition's offset).
MARKER_OFFSET = 100


def epoch_write(
    bootstrap: str,
    out_topic: str,
    marker_topic: str,
    app_id: str,
    epoch: int = 5,
    checkpoint: str = "c1",
    instance_id: str = "test-instance",
) -> EpochWrite:
    """A one-task epoch writing bytes records to `out_topic`, its marker on `marker_topic` partition 0."""
    config = KafkaSinkConfig.from_properties(
        {"name": "out", "bootstrap.servers": bootstrap, "topic": out_topic}, source="test"
    )
    output = SinkOutput(
        config, SerdeSpec(field="key", format="bytes"), SerdeSpec(field="value", format="bytes")
    )
    slot = TaskSlot(f"{marker_topic}-0", f"{app_id}-group", marker_topic, 0, MARKER_OFFSET)
    return EpochWrite(
        app_id=app_id,
        instance_id=instance_id,
        checkpoint_id=checkpoint,
        epoch=epoch,
        query="out",
        outputs=(output,),
        slots=(slot,),
        transaction_timeout_ms=30000,
    )


def commit_attempt(write: EpochWrite, task: int, records: list[tuple[bytes, bytes]]) -> bool:
    """One attempt of sink task `task` over one Arrow batch of `(key, value)` rows: True when it committed the
    records, False when it found them committed."""
    batch = pa.RecordBatch.from_pydict(
        {"key": [k for k, _ in records], "value": [v for _, v in records]},
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]),
    )
    return TransactionalTask(write, task).commit([batch])
