"""Choose and run the Kafka cluster the tests talk to.

Order: an external cluster named by `ETHEREAL_KAFKA_BOOTSTRAP`; a testcontainers Kafka container when a Docker engine
answers; otherwise the real local Apache Kafka broker from Maven Central jars (`ethereal_kafka.broker`).
Failure tests that kill brokers of a replicated cluster get a local 3-node cluster from the same jars
(`start_local_cluster`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ethereal_kafka.broker import (
    JVM_MARKER,
    BrokerSettings,
    ClusterSettings,
    LocalBroker,
    LocalCluster,
    kafka_version,
)
from ethereal_kafka.broker.procs import live_pids

#: The image used where a Docker engine exists: testcontainers' Kafka module boots Confluent's image layout (KRaft).
CONTAINER_IMAGE = "confluentinc/cp-kafka:7.9.0"

#: Broker settings a single-node cluster needs for transactions, as container environment variables.
_CONTAINER_ENV = {
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "1",
    "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
    "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
    "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
    "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
    "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
}


@dataclass
class KafkaCluster:
    """A running cluster for tests.

    Attributes:
        bootstrap: `host:port` for clients.
        backend: `external`, `testcontainers` or `local-broker`.
        description: One line saying what runs where (printed in the pytest summary).
        broker: The local broker, when that backend runs (tests may stop/kill/restart it).
    """

    bootstrap: str
    backend: str
    description: str
    broker: LocalBroker | None = None
    _container: Any = field(default=None, repr=False)

    def close(self) -> None:
        """Stop what `start_cluster` started (never an external cluster)."""
        if self.broker is not None:
            self.broker.destroy()
        if self._container is not None:
            self._container.stop()


def docker_available() -> bool:
    """True when a Docker engine answers a ping within a few seconds."""
    try:
        import docker

        client = docker.from_env(timeout=3)  # type: ignore[attr-defined]
        return bool(client.ping())
    except Exception:  # no engine, no socket, no permission: all mean "not here"
        return False


def start_cluster(state_root: Path | None = None) -> KafkaCluster:
    """Start (or connect to) the cluster per the documented order and return it."""
    external = os.environ.get("ETHEREAL_KAFKA_BOOTSTRAP")
    if external:
        return KafkaCluster(
            external, "external", f"external cluster at {external} (ETHEREAL_KAFKA_BOOTSTRAP)"
        )
    if os.environ.get("ETHEREAL_KAFKA_NO_DOCKER") != "1" and docker_available():
        return _start_container()
    root = state_root or Path(tempfile.mkdtemp(prefix="ethereal-kafka-test-"))
    # Tests check that timed-out transactions are aborted: let the broker look for them every second.
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}
    broker = LocalBroker(
        BrokerSettings(name="pytest", state_dir=root / f"pytest-broker-{os.getpid()}", overrides=overrides)
    )
    status = broker.start()
    assert status.bootstrap is not None
    return KafkaCluster(
        status.bootstrap,
        "local-broker",
        f"local Apache Kafka {kafka_version()} broker from Maven Central jars at {status.bootstrap} "
        f"(pid {status.pid}; no Docker engine answered)",
        broker=broker,
    )


def start_local_cluster(state_root: Path, nodes: int = 3) -> LocalCluster:
    """Start a local N-node cluster from the pinned jars for failure tests that kill its nodes: always the jar-based
    one (an external cluster or a container cannot be SIGKILLed node by node). The caller `destroy()`s it."""
    overrides = {
        # As the session broker: the tests check that timed-out transactions are aborted.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        # The controller fences a node that sent no heartbeat for this long; only then do its leaderships and
        # coordinators move. Kafka's 9 s (2 s heartbeats) took 8-13 s on a loaded 2-core machine, the better part
        # of the bound the kill tests hold an epoch to (twice the usual epoch + 10 s); the framework's own share,
        # from the fence to the next committed output, was 3-4.5 s. 6 s keeps the bound about the framework.
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1000",
    }
    cluster = LocalCluster(
        ClusterSettings(
            name=f"pytest-cluster{nodes}",
            state_dir=state_root / f"pytest-cluster{nodes}-{os.getpid()}",
            nodes=nodes,
            overrides=overrides,
        )
    )
    try:
        cluster.start()
    except BaseException:
        cluster.destroy()
        raise
    return cluster


def _start_container() -> KafkaCluster:
    from testcontainers.community.kafka import KafkaContainer

    container = KafkaContainer(CONTAINER_IMAGE).with_kraft()
    for key, value in _CONTAINER_ENV.items():
        container = container.with_env(key, value)
    container.start(timeout=120)
    bootstrap = container.get_bootstrap_server()
    return KafkaCluster(
        bootstrap,
        "testcontainers",
        f"testcontainers Kafka ({CONTAINER_IMAGE}) at {bootstrap}",
        _container=container,
    )


def leaked_broker_pids(state_dir_fragment: str) -> list[int]:
    """PIDs of broker JVMs whose state directory contains `state_dir_fragment` (leak check)."""
    return live_pids(lambda args: any(a.startswith(JVM_MARKER) and state_dir_fragment in a for a in args))
