"""The checkpoint coordinator's start-up and phase two, driven directly (no Spark) against the real broker."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.config.job import JobConfig
from ethereal_kafka.connectors.kafka.offsets import Offsets
from ethereal_kafka.eos.coordinator import CheckpointCoordinator
from ethereal_kafka.eos.errors import FencedError
from ethereal_kafka.eos.markers import EpochMarker, OwnerClaim
from ethereal_kafka.plan.query import Layout, Query
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory
from tests.integration.eos_helpers import group_offsets


def _coordinator(
    bootstrap: str, app: str, source_topic: str, sink_topic: str, root: Path, instance: str
) -> tuple[CheckpointCoordinator, KafkaSourceConfig]:
    source = KafkaSourceConfig.from_properties(
        {
            "name": "events",
            "bootstrap.servers": bootstrap,
            "topics": source_topic,
            "group.id": app,
            "max.records.per.epoch": 1000,
        },
        source="test",
    )
    sink = KafkaSinkConfig.from_properties(
        {"name": "out", "bootstrap.servers": bootstrap, "topic": sink_topic}, source="test"
    )
    coordinator = CheckpointCoordinator(
        JobConfig.from_properties(
            {
                "app.id": app,
                "sources": "events",
                "sinks": "out",
                "pipeline": "tests.integration.test_coordinator:unused",
                "checkpoint.location": str(root),
                "sink.tasks": 2,
            },
            source="test",
        ),
        {"events": source},
        {"out": sink},
        owner=OwnerClaim(instance),
    )
    coordinator.prepare([Query("out", (sink,), (source,), Layout.SHUFFLING, stateful=False)])
    return coordinator, source


def test_a_taken_over_coordinator_cannot_move_group_offsets_backwards(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """Instance A is still finishing epoch 3 when instance B (which took over) has committed epoch 5's offsets. A's
    phase two must fail, not put the group back at epoch 3's offsets (a restart would then reprocess them)."""
    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    app = f"phase2-{uuid.uuid4().hex[:8]}"
    old, source = _coordinator(bs, app, src, dst, tmp_path / "a", "instance-a")
    new, _ = _coordinator(bs, app, src, dst, tmp_path / "b", "instance-b")
    try:
        new.commit_source_offsets([Offsets({(src, 0): 50, (src, 1): 50})], "ckpt-b", 5, "out")
        # A's epoch under its own checkpoint: its phase-two producer was fenced by B's start.
        with pytest.raises(FencedError, match="took over"):
            old.commit_source_offsets([Offsets({(src, 0): 30, (src, 1): 30})], "ckpt-a", 3, "out")
        # An older epoch of the same checkpoint (a zombie replaying): the marker already covers it, nothing moves.
        new.commit_source_offsets([Offsets({(src, 0): 40, (src, 1): 40})], "ckpt-b", 4, "out")
        committed = group_offsets(bs, source.group, src, 2)
        assert {p: o for p, (o, _) in committed.items()} == {0: 50, 1: 50}
        assert {EpochMarker.parse(m) for _, m in committed.values()} == {EpochMarker(app, "ckpt-b", 5)}
    finally:
        old.close()
        new.close()
