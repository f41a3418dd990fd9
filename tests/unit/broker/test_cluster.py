"""The local cluster's layout and settings, and the role arithmetic (no JVM started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ethereal_kafka.broker import ClusterSettings, LocalCluster
from ethereal_kafka.broker.cluster import cluster_settings
from ethereal_kafka.broker.roles import coordinator_partition, java_string_hash
from ethereal_kafka.errors import BrokerError


def test_java_string_hash_matches_java() -> None:
    # Values of java.lang.String#hashCode.
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("Hello World") == -862545276
    assert java_string_hash("polygenelubricants") == -(2**31)


def test_coordinator_partition_is_kafkas_abs_modulo() -> None:
    assert coordinator_partition("Hello World", 50) == 862545276 % 50
    assert coordinator_partition("polygenelubricants", 50) == 0  # Utils.abs(Integer.MIN_VALUE) is 0
    assert coordinator_partition("hello", 3) == 99162322 % 3


def test_cluster_settings_replicate_like_production() -> None:
    three = cluster_settings(3)
    assert three["default.replication.factor"] == "3" and three["min.insync.replicas"] == "2"
    assert (
        three["offsets.topic.replication.factor"] == three["transaction.state.log.replication.factor"] == "3"
    )
    assert three["transaction.state.log.min.isr"] == "2"
    five = cluster_settings(5)
    assert five["default.replication.factor"] == "3" and five["min.insync.replicas"] == "2"
    one = cluster_settings(1)
    assert one["default.replication.factor"] == "1" and one["min.insync.replicas"] == "1"


def test_nodes_share_a_cluster_id_and_one_quorum(tmp_path: Path) -> None:
    cluster = LocalCluster(ClusterSettings(state_dir=tmp_path / "c", nodes=3))
    cluster._layout()  # what `start` writes first
    nodes = [cluster.node(n) for n in cluster.node_ids]
    assert len({n.settings.cluster_id for n in nodes}) == 1
    voters = {n.settings.overrides["controller.quorum.voters"] for n in nodes}
    assert len(voters) == 1 and len(voters.pop().split(",")) == 3
    assert [n.settings.overrides["node.id"] for n in nodes] == ["1", "2", "3"]
    ports = [n.settings.port for n in nodes] + [n.settings.controller_port for n in nodes]
    assert len(set(ports)) == 6
    assert cluster.bootstrap == ",".join(f"127.0.0.1:{n.settings.port}" for n in nodes)
    layout = json.loads((tmp_path / "c" / "cluster.json").read_text())
    assert LocalCluster(ClusterSettings(state_dir=tmp_path / "c", nodes=3))._layout() == layout  # kept


def test_a_cluster_never_takes_over_a_single_brokers_state(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "state.json").write_text("{}")
    with pytest.raises(BrokerError, match="single-node broker"):
        LocalCluster(ClusterSettings(state_dir=tmp_path / "b"))._layout()
    LocalCluster(ClusterSettings(state_dir=tmp_path / "c", nodes=3))._layout()
    with pytest.raises(BrokerError, match="has 3 nodes, not 5"):
        LocalCluster(ClusterSettings(state_dir=tmp_path / "c", nodes=5))._layout()


def test_status_of_a_cluster_never_started(tmp_path: Path) -> None:
    status = LocalCluster(ClusterSettings(state_dir=tmp_path / "none")).status()
    assert not status.running and not status.nodes and status.bootstrap is None
