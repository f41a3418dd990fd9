"""A real Apache Kafka cluster of N KRaft nodes on 127.0.0.1, from the same pinned jars as `LocalBroker`.

Each node is a `LocalBroker` (one JVM, broker and controller combined, the lean JVM options) in `<state>/node-<id>`,
all formatted with one cluster id and voting in one controller quorum, so a cluster of 3 survives the loss of any
one node. The internal topics (offsets, transaction state) and every new topic get replication factor N (at most 3)
and `min.insync.replicas` N-1: the production layout (replication 3, `min.insync.replicas=2`) on one machine.

`LocalCluster` is what `ethereal-kafka broker start --nodes 3` and the test kit's `kafka_cluster3` fixture use.
Failure tests take one node down (`kill`: SIGKILL, data kept) and bring it back (`start_node`), ask which node holds
a role (`leader`, `transaction_coordinator`, `group_coordinator`) and wait until every partition is fully replicated
again (`wait_healthy`). The ports of the nodes are chosen on the first start and kept in `<state>/cluster.json`, so
clients keep their bootstrap list across restarts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ethereal_kafka.broker import roles
from ethereal_kafka.broker.local import BrokerSettings, BrokerStatus, LocalBroker, new_cluster_id
from ethereal_kafka.broker.ownership import process_uid, refuse_foreign, start_lock
from ethereal_kafka.broker.ports import pick_ports
from ethereal_kafka.broker.procs import JVM_MARKER, live_pids
from ethereal_kafka.errors import BrokerError
from ethereal_kafka.paths import cache_home

__all__ = ["ClusterSettings", "ClusterStatus", "LocalCluster", "cluster_settings"]

_LAYOUT = "cluster.json"


def cluster_settings(nodes: int) -> dict[str, str]:
    """`server.properties` entries every node of an N-node cluster shares: replication min(N, 3) for the internal
    topics and as the default of new topics, `min.insync.replicas` one less (at least 1), and 3 partitions for the
    internal topics (so coordinators spread over the nodes) instead of 50."""
    replicas = min(nodes, 3)
    min_isr = max(1, replicas - 1)
    return {
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "3",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(min_isr),
    }


@dataclass(frozen=True)
class ClusterSettings:
    """How to run one local cluster.

    Attributes:
        name: Names the state directory (`<cache>/brokers/<name>`) unless `state_dir` is given.
        state_dir: Where the layout and each node's state (`node-<id>`) live.
        nodes: How many nodes (each broker and controller); 3 survives the loss of one.
        heap: Each node's JVM heap (`-Xmx`).
        start_timeout_s: How long a start waits for the nodes to answer and register.
        overrides: Extra `server.properties` entries for every node (they win over `cluster_settings`).
    """

    name: str = "cluster3"
    state_dir: Path | None = None
    nodes: int = 3
    heap: str = "512m"
    start_timeout_s: float = 120.0
    overrides: Mapping[str, str] = field(default_factory=dict)

    def resolved_state_dir(self) -> Path:
        """Return the state directory these settings name."""
        return self.state_dir if self.state_dir is not None else cache_home() / "brokers" / self.name


@dataclass(frozen=True)
class ClusterStatus:
    """What `LocalCluster.status` found: one `BrokerStatus` per node (by node id)."""

    nodes: Mapping[int, BrokerStatus]
    bootstrap: str | None
    state_dir: Path

    @property
    def running(self) -> bool:
        """True when every node runs."""
        return bool(self.nodes) and all(s.running for s in self.nodes.values())

    @property
    def any_running(self) -> bool:
        """True when at least one node runs."""
        return any(s.running for s in self.nodes.values())

    def describe(self) -> str:
        """Human lines: the cluster, then one per node."""
        up = sum(s.running for s in self.nodes.values())
        head = f"{up} of {len(self.nodes)} nodes running (state {self.state_dir})"
        if self.running:
            head = f"running: {len(self.nodes)}-node cluster at {self.bootstrap} (state {self.state_dir})"
        lines = [head]
        for node_id, status in sorted(self.nodes.items()):
            lines.append(f"  node {node_id}: {status.describe()}")
        return "\n".join(lines)


class LocalCluster:
    """Start, inspect, stop and break one local N-node cluster.

    Methods are safe to call from different processes: all state is read from the state directory.
    """

    def __init__(self, settings: ClusterSettings | None = None) -> None:
        self.settings = settings or ClusterSettings()
        if self.settings.nodes < 1:
            raise BrokerError(f"a cluster needs at least one node, not {self.settings.nodes}")
        self.state_dir = self.settings.resolved_state_dir()

    # -- layout --------------------------------------------------------------------------------------------------
    @property
    def node_ids(self) -> list[int]:
        """The nodes' ids, 1..N."""
        return list(range(1, self.settings.nodes + 1))

    def _read_layout(self) -> dict[str, object]:
        try:
            loaded = json.loads((self.state_dir / _LAYOUT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def _layout(self) -> dict[str, object]:
        """The cluster id and each node's ports, chosen on the first start and kept."""
        layout = self._read_layout()
        if layout:
            if len(_ports(layout)) != self.settings.nodes:
                raise BrokerError(
                    f"the cluster in {self.state_dir} has {len(_ports(layout))} nodes, not "
                    f"{self.settings.nodes}: use another --name or --state-dir"
                )
            return layout
        if (self.state_dir / "state.json").exists():
            raise BrokerError(
                f"{self.state_dir} holds a single-node broker: use another --name or --state-dir for a cluster"
            )
        ports = pick_ports(2 * self.settings.nodes)
        layout = {
            "cluster_id": new_cluster_id(),
            "nodes": {
                str(node_id): {"port": ports[2 * i], "controller_port": ports[2 * i + 1]}
                for i, node_id in enumerate(self.node_ids)
            },
        }
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / _LAYOUT).write_text(json.dumps(layout), encoding="utf-8")
        return layout

    def node(self, node_id: int) -> LocalBroker:
        """The `LocalBroker` of node `node_id` (its ports, the shared cluster id, the quorum of all nodes).

        Raises:
            BrokerError: no such node, or the cluster was never started (no layout yet).
        """
        layout = self._read_layout()
        ports = _ports(layout)
        if node_id not in ports:
            raise BrokerError(f"the cluster in {self.state_dir} has no node {node_id} (started yet?)")
        voters = ",".join(f"{n}@127.0.0.1:{p[1]}" for n, p in sorted(ports.items()))
        port, controller_port = ports[node_id]
        return LocalBroker(
            BrokerSettings(
                name=f"{self.settings.name}-node-{node_id}",
                state_dir=self.state_dir / f"node-{node_id}",
                port=port,
                controller_port=controller_port,
                heap=self.settings.heap,
                start_timeout_s=self.settings.start_timeout_s,
                overrides={
                    "node.id": str(node_id),
                    "controller.quorum.voters": voters,
                    **cluster_settings(self.settings.nodes),
                    **self.settings.overrides,
                },
                cluster_id=str(layout["cluster_id"]),
            )
        )

    @property
    def bootstrap(self) -> str:
        """Every node's address, comma-separated (clients reach the cluster while any node runs).

        Raises:
            BrokerError: the cluster was never started.
        """
        ports = _ports(self._read_layout())
        if not ports:
            raise BrokerError(f"no cluster was started in {self.state_dir}")
        return ",".join(f"127.0.0.1:{p[0]}" for _, p in sorted(ports.items()))

    # -- queries -------------------------------------------------------------------------------------------------
    def status(self) -> ClusterStatus:
        """Report each node's JVM, and the bootstrap list."""
        ports = _ports(self._read_layout())
        nodes = {n: self.node(n).status() for n in sorted(ports)}
        return ClusterStatus(nodes, self.bootstrap if ports else None, self.state_dir)

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading `topic[partition]` (`roles.NO_LEADER` when none does)."""
        return roles.partition_leader(self.bootstrap, topic, partition)

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The node id coordinating `transactional_id`'s transactions."""
        return roles.transaction_coordinator(self.bootstrap, transactional_id)

    def group_coordinator(self, group: str) -> int:
        """The node id coordinating consumer group `group`."""
        return roles.group_coordinator(self.bootstrap, group)

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> ClusterStatus:
        """Start every stopped node, then wait until each answers and all are registered.

        The nodes are launched together (a node of a new cluster answers only once a quorum of controllers runs).
        Idempotent; a stopped node restarts on its ports with its data.

        Raises:
            BrokerError: as `LocalBroker.start` for any node, or not all nodes registered within
                `start_timeout_s`.
        """
        refuse_foreign(self.state_dir, None)
        with start_lock(self.state_dir):
            self._layout()
            nodes = [self.node(n) for n in self.node_ids]
            with contextlib.ExitStack() as locks:
                try:
                    launched = []
                    for node in nodes:
                        node.refuse_foreign()
                        locks.enter_context(start_lock(node.state_dir))
                        if not node.status().running:
                            launched.append((node, node.spawn()))
                    for node, proc in launched:
                        node.await_ready(proc)
                except BrokerError:
                    self._kill_all()  # no half-started cluster is left behind
                    raise
            self._wait_registered(self.settings.start_timeout_s)
        return self.status()

    def start_node(self, node_id: int) -> BrokerStatus:
        """Start one node (after `kill` or `stop_node`) on its ports with its data; returns once it answers a
        metadata request (`wait_healthy` waits until it caught up).

        Raises:
            BrokerError: as `LocalBroker.start`.
        """
        return self.node(node_id).start()

    def kill(self, node_id: int) -> bool:
        """SIGKILL node `node_id` (a crash: no controlled shutdown); its data stays for `start_node`. Returns False
        when it was not running."""
        return self.node(node_id).kill()

    def stop_node(self, node_id: int, timeout_s: float = 30.0) -> bool:
        """Stop node `node_id` cleanly (SIGTERM: a controlled shutdown moves its leaderships first)."""
        return self.node(node_id).stop(timeout_s)

    def stop(self, timeout_s: float = 30.0, last_grace_s: float = 5.0) -> bool:
        """Stop every node; True if any ran.

        One node after the other, each cleanly (SIGTERM, SIGKILL after `timeout_s`): a controlled shutdown hands
        the node's leaderships to the others while a quorum of controllers remains. The last node cannot finish
        one (no quorum is left to answer it: Kafka 4.3 then waits forever), so it gets `last_grace_s` after
        SIGTERM and then SIGKILL; its data is written (the page cache outlives the process) and its next start
        recovers the unflushed segments.
        """
        ports = _ports(self._read_layout())
        running = [
            node for node in (self.node(n) for n in sorted(ports, reverse=True)) if node.status().running
        ]
        for i, node in enumerate(running):
            pid = node.terminate()
            if pid is not None:
                node.await_exit(pid, timeout_s if i < len(running) - 1 else last_grace_s)
        return bool(running)

    def destroy(self) -> None:
        """SIGKILL every node and delete the state directory (data, logs, layout): the test kit's teardown."""
        self._kill_all()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def wait_healthy(self, timeout_s: float = 120.0) -> float:
        """Wait until every node is registered and every partition has a leader and all its replicas in sync (a
        restarted node caught up); returns the seconds waited.

        Raises:
            BrokerError: not healthy within `timeout_s` (the message names partitions still lagging).
        """
        began = time.monotonic()
        last: roles.Health | None = None
        while time.monotonic() - began < timeout_s:
            with contextlib.suppress(BrokerError):
                last = roles.health(self.bootstrap)
                if last.complete(self.settings.nodes):
                    return time.monotonic() - began
            time.sleep(0.5)
        seen = (
            "no metadata" if last is None else f"brokers {sorted(last.brokers)}, lagging {last.lagging[:5]}"
        )
        raise BrokerError(f"cluster in {self.state_dir} not healthy within {timeout_s:.0f}s: {seen}")

    # -- internals -----------------------------------------------------------------------------------------------
    def _wait_registered(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        brokers: frozenset[int] = frozenset()
        while time.monotonic() < deadline:
            with contextlib.suppress(BrokerError):
                brokers = roles.health(self.bootstrap).brokers
                if len(brokers) >= self.settings.nodes:
                    return
            time.sleep(0.25)
        raise BrokerError(
            f"only nodes {sorted(brokers)} of {self.node_ids} registered within {timeout_s:.0f}s "
            f"(logs: {self.state_dir}/node-*/broker.log)"
        )

    def _kill_all(self) -> None:
        for node_id in sorted(_ports(self._read_layout())):
            self.node(node_id).kill()
        # And any node JVM of this user still running over the state directory whose pid file is gone (a state
        # directory deleted under a running cluster): found by its command-line marker.
        me = os.geteuid()
        marker = f"{JVM_MARKER}{self.state_dir}/"
        for pid in live_pids(lambda args: any(a.startswith(marker) for a in args)):
            if process_uid(pid) == me:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _ports(layout: Mapping[str, object]) -> dict[int, tuple[int, int]]:
    """`{node id: (port, controller port)}` of a layout (empty when there is none)."""
    nodes = layout.get("nodes")
    if not isinstance(nodes, dict):
        return {}
    return {int(n): (int(p["port"]), int(p["controller_port"])) for n, p in nodes.items()}
