"""The checkpoint coordinator's start-up and phase two, driven directly (no Spark) against the real broker."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ethereal_kafka import faults
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.config.job import JobConfig
from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter
from ethereal_kafka.connectors.kafka.offsets import Offsets
from ethereal_kafka.connectors.kafka.topics import read_committed
from ethereal_kafka.eos.coordinator import CheckpointCoordinator
from ethereal_kafka.eos.dead_letters import DeadLetterReport
from ethereal_kafka.eos.errors import CheckpointMismatchError, FencedError
from ethereal_kafka.eos.markers import EpochMarker, OwnerClaim
from ethereal_kafka.plan.query import Layout, Query
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory
from tests.integration.eos_helpers import group_offsets


def _coordinator(
    bootstrap: str,
    app: str,
    source_topic: str,
    sink_topic: str,
    root: Path,
    instance: str,
    dead_letters: str | None = None,
    job: dict[str, object] | None = None,
) -> tuple[CheckpointCoordinator, KafkaSourceConfig]:
    dlq = {"on.error": "dlq", "dlq.topic": dead_letters, "dlq.delivery": "epoch"} if dead_letters else {}
    source = KafkaSourceConfig.from_properties(
        {
            "name": "events",
            "bootstrap.servers": bootstrap,
            "topics": source_topic,
            "group.id": app,
            "max.records.per.epoch": 1000,
            **dlq,
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
                **(job or {}),
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
        # An older epoch of the same checkpoint (its Spark log rolled back): refused, nothing moves.
        with pytest.raises(CheckpointMismatchError, match="holds epoch 5 of checkpoint ckpt-b"):
            new.commit_source_offsets([Offsets({(src, 0): 40, (src, 1): 40})], "ckpt-b", 4, "out")
        committed = group_offsets(bs, source.group, src, 2)
        assert {p: o for p, (o, _) in committed.items()} == {0: 50, 1: 50}
        assert {EpochMarker.parse(m) for _, m in committed.values()} == {EpochMarker(app, "ckpt-b", 5)}
    finally:
        old.close()
        new.close()


def test_a_retried_phase_two_commit_sends_the_epochs_dead_letters_once(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Phase two's commit of an epoch (its input offsets and its dead letters, in one transaction) lands, but the
    client is told it failed (a timeout while the coordinator applied it). The retry must read the marker again and
    stop there: a retry that opened a new transaction and sent the dead letters again wrote them twice."""
    monkeypatch.setenv(faults.FAIL_AFTER_COMMIT_ENV, "phase_two")
    bs = kafka_cluster.bootstrap
    src, dst, dlq = topic_factory(partitions=2), topic_factory(partitions=2), topic_factory(partitions=1)
    app = f"phase2-dlq-{uuid.uuid4().hex[:8]}"
    coordinator, source = _coordinator(bs, app, src, dst, tmp_path, "instance-a", dead_letters=dlq)
    letters = tuple(DeadLetter(src, 0, offset, b"k", b"poison %d" % offset, ()) for offset in (3, 7, 11))
    try:
        coordinator.dead_letters.add([DeadLetterReport(source.group, src, 0, 0, 20, letters)])
        coordinator.commit_source_offsets([Offsets({(src, 0): 20, (src, 1): 20})], "ckpt", 0, "out", "0f0f")
    finally:
        coordinator.close()
    got = [r.value for r in read_committed(bs, dlq, timeout_s=10)]
    assert sorted(got) == sorted(d.value for d in letters), f"each dead letter once, got {got}"
    committed = group_offsets(bs, source.group, src, 2)
    assert {p: o for p, (o, _) in committed.items()} == {0: 20, 1: 20}


def test_a_transaction_timeout_beyond_the_brokers_maximum_is_refused_at_start(
    kafka_cluster: KafkaCluster, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """The broker aborts a transaction older than its `transaction.max.timeout.ms` (15 minutes by default) and
    refuses producers asking for more: the start checks it (DescribeConfigs) and refuses in one line."""
    from ethereal_kafka.errors import ConfigError

    bs = kafka_cluster.bootstrap
    src, dst = topic_factory(partitions=1), topic_factory(partitions=1)
    app = f"maxtxn-{uuid.uuid4().hex[:8]}"
    with pytest.raises(
        ConfigError, match=r"exceeds the broker's transaction.max.timeout.ms=900000"
    ) as refused:
        _coordinator(bs, app, src, dst, tmp_path, "i", job={"transaction.timeout.ms": 960000})
    assert "\n" not in str(refused.value)
