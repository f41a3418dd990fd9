"""Build one epoch's sink-task description by hand and run a task attempt on it (no Spark), for the sink task tests."""

from __future__ import annotations

import contextlib

import pyarrow as pa
from confluent_kafka import KafkaException

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.encoding import SinkOutput
from ethereal_kafka.connectors.kafka.topics import create_topic
from ethereal_kafka.eos.markers import OwnerClaim
from ethereal_kafka.eos.names import progress_topic
from ethereal_kafka.eos.ownership import read_claim, write_claim
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
    ranges: str = "0123456789abcdef",
    claim: bool = True,
    sink_settings: dict[str, str] | None = None,
) -> EpochWrite:
    """A one-task epoch writing bytes records to `out_topic`, its marker on `marker_topic` partition 0 (`ranges`:
    the digest of its input ranges). With `claim`, `instance_id` claims the app first (a task writes only for the
    instance that owns the app), unless the app is claimed already."""
    if claim:
        with contextlib.suppress(KafkaException):  # it exists already
            create_topic(bootstrap, progress_topic(app_id), 1)
        if read_claim(app_id, bootstrap, {}) is None:
            write_claim(app_id, bootstrap, {}, OwnerClaim(instance_id))
    config = KafkaSinkConfig.from_properties(
        {"name": "out", "bootstrap.servers": bootstrap, "topic": out_topic, **(sink_settings or {})},
        source="test",
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
        ranges=ranges,
        query="out",
        outputs=(output,),
        slots=(slot,),
        transaction_timeout_ms=30000,
    )


def commit_attempt(
    write: EpochWrite, task: int, records: list[tuple[bytes, bytes]], attempt: TransactionalTask | None = None
) -> bool:
    """One attempt of sink task `task` (or `attempt`, to look at it afterwards) over one Arrow batch of
    `(key, value)` rows: True when it committed the records (or saw them committed by a newer attempt), False when
    it found them committed."""
    batch = pa.RecordBatch.from_pydict(
        {"key": [k for k, _ in records], "value": [v for _, v in records]},
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]),
    )
    return (attempt or TransactionalTask(write, task)).commit([batch])
