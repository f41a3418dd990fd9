"""pytest plugin: `kafka_cluster`, `kafka_cluster3`, `topic_factory`, `kafka_bootstrap`, `schema_registry` and
`spark` fixtures.

Registered through the `pytest11` entry point. The cluster fixtures report what ran in the terminal summary and, at
session end, check that no broker JVM they started is left running.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ethereal_kafka.connectors.kafka.topics import create_topic
from ethereal_kafka.testing.cluster import (
    KafkaCluster,
    leaked_broker_pids,
    start_cluster,
    start_local_cluster,
)
from ethereal_kafka.testing.registry import schema_registry

__all__ = [
    "checkpoint_dir",
    "kafka_bootstrap",
    "kafka_cluster",
    "kafka_cluster3",
    "run_job",
    "schema_registry",
    "spark",
    "topic_factory",
]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ethereal_kafka.broker import LocalCluster
    from ethereal_kafka.testing.jobs import JobRun

_REPORT: list[str] = []

TopicFactory = Callable[..., str]
#: The `run_job` fixture: `run_job(job_path, available_now=True, env=None, timeout_s=300, check=True) -> JobRun`.
RunJob = Callable[..., "JobRun"]


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A real Kafka cluster for the whole session (external, testcontainers, or the local broker)."""
    root = tmp_path_factory.mktemp("kafka")
    cluster = start_cluster(state_root=root)
    _REPORT.append(f"kafka_cluster backend: {cluster.backend} — {cluster.description}")
    yield cluster
    from ethereal_kafka.connectors.kafka.clients import close_cached_clients

    close_cached_clients()  # clients the tests' jobs cached would otherwise poll a broker that is going away
    cluster.close()
    if cluster.backend == "local-broker":
        leaked = leaked_broker_pids(str(root))
        if leaked:
            raise AssertionError(f"broker JVM(s) left running after the session: pids {leaked}")
        _REPORT.append("kafka_cluster teardown: local broker stopped, no broker JVM left running")


@pytest.fixture(scope="session")
def kafka_cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local 3-node KRaft cluster from the pinned jars (replication 3, `min.insync.replicas=2`) for the whole
    session, started only when a test asks for it: tests kill, stop and restart its nodes (`LocalCluster.kill`,
    `start_node`) and ask which node holds a role. Tests must leave it with all three nodes running
    (`wait_healthy`). Stopped, and its state deleted, at session end."""
    root = tmp_path_factory.mktemp("kafka-cluster3")
    cluster = start_local_cluster(root, nodes=3)
    _REPORT.append(f"kafka_cluster3: local 3-node KRaft cluster at {cluster.bootstrap}")
    yield cluster
    from ethereal_kafka.connectors.kafka.clients import close_cached_clients

    close_cached_clients()
    cluster.destroy()
    leaked = leaked_broker_pids(str(root))
    if leaked:
        raise AssertionError(f"cluster node JVM(s) left running after the session: pids {leaked}")
    _REPORT.append("kafka_cluster3 teardown: 3 nodes stopped, no broker JVM left running")


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
def spark(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[SparkSession]:
    """A local[2] SparkSession with the framework's settings and the Kafka source registered; Spark's log goes to a
    file of the session's temporary folder (and to each `run_job` run's log folder).

    The test run's root folder is put on the Python workers' `PYTHONPATH` (before the session starts, so the
    workers inherit it): pipelines defined in the tests' own modules import there as they do in the test process.
    """
    from ethereal_kafka.runtime.jvm import OPTIONS_KEY
    from ethereal_kafka.runtime.logs import spark_log_options
    from ethereal_kafka.runtime.spark import local_session

    root = str(pytestconfig.rootpath)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, *paths) if p)
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    # Spark's log4j output goes to a file from the JVM's first line (each `run_job` then routes it to the run's log
    # folder), so nothing of Spark's reaches pytest's output.
    logs = tmp_path_factory.mktemp("spark-logs")
    session = local_session(
        "ethereal-kafka-tests",
        conf={
            "spark.sql.warehouse.dir": str(warehouse),
            "spark.local.dir": str(warehouse),
            OPTIONS_KEY: spark_log_options(logs),
        },
    )
    yield session
    session.stop()


@pytest.fixture
def run_job(spark: SparkSession) -> RunJob:
    """Run a job file in this process on the session's SparkSession: `run_job(path, available_now=True, env=None,
    timeout_s=300, check=True) -> JobRun` (see `ethereal_kafka.testing.jobs.run_in_process`)."""
    from ethereal_kafka.testing.jobs import run_in_process

    def run(job_path: str | Path, **options: Any) -> JobRun:
        return run_in_process(spark, job_path, **options)

    return run


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
    # Every embedded driver JVM of the tests (the session's, and each `ethereal-kafka run` a test starts, which
    # inherits the environment) uses the lean start-up profile; set the variable to "" to test with the defaults.
    from ethereal_kafka.runtime.jvm import OPTIONS_ENV, TEST_DRIVER_OPTIONS

    os.environ.setdefault(OPTIONS_ENV, TEST_DRIVER_OPTIONS)
