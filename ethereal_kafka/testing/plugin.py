"""pytest plugin: `kafka_cluster`, `topic_factory`, `kafka_bootstrap`, `schema_registry` and `spark` fixtures.

Registered through the `pytest11` entry point. The cluster fixture reports which backend ran in the terminal summary
and, at session end, checks that no broker JVM it started is left running.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ethereal_kafka.testing.cluster import KafkaCluster, leaked_broker_pids, start_cluster
from ethereal_kafka.testing.kafka_io import create_topic
from ethereal_kafka.testing.registry import schema_registry

__all__ = ["checkpoint_dir", "kafka_bootstrap", "kafka_cluster", "schema_registry", "spark", "topic_factory"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_REPORT: list[str] = []

TopicFactory = Callable[..., str]


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A real Kafka cluster for the whole session (external, testcontainers, or the local broker)."""
    root = tmp_path_factory.mktemp("kafka")
    cluster = start_cluster(state_root=root)
    _REPORT.append(f"kafka_cluster backend: {cluster.backend} — {cluster.description}")
    yield cluster
    cluster.close()
    if cluster.backend == "local-broker":
        leaked = leaked_broker_pids(str(root))
        if leaked:
            raise AssertionError(f"broker JVM(s) left running after the session: pids {leaked}")
        _REPORT.append("kafka_cluster teardown: local broker stopped, no broker JVM left running")


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_cluster: KafkaCluster) -> str:
    """The bootstrap address of `kafka_cluster`."""
    return kafka_cluster.bootstrap


@pytest.fixture
def topic_factory(kafka_cluster: KafkaCluster, request: pytest.FixtureRequest) -> TopicFactory:
    """Create topics with unique names: `topic_factory(partitions=1, prefix=None, config=None) -> name`."""
    base = request.node.name.split("[")[0].replace("_", "-")[:40]

    def make(partitions: int = 1, prefix: str | None = None, config: Mapping[str, str] | None = None) -> str:
        name = f"{prefix or base}-{uuid.uuid4().hex[:8]}"
        return create_topic(kafka_cluster.bootstrap, name, partitions, config)

    return make


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A local[2] SparkSession with the framework's settings and the Kafka source registered."""
    from ethereal_kafka.runtime.spark import local_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = local_session(
        "ethereal-kafka-tests",
        conf={"spark.sql.warehouse.dir": str(warehouse), "spark.local.dir": str(warehouse)},
    )
    yield session
    session.stop()


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    """A fresh Spark checkpoint directory for one test."""
    path = tmp_path / "checkpoint"
    path.mkdir()
    return path


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say which Kafka backend the session used (and that teardown left nothing running)."""
    for line in _REPORT:
        terminalreporter.write_line(f"ethereal-kafka: {line}")


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers this plugin's users put on tests."""
    config.addinivalue_line("markers", "integration: needs a real Kafka broker")
    os.environ.setdefault("ETHEREAL_KAFKA_TESTING", "1")
