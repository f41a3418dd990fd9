"""Fixtures shared by the integration tests: one Spark standalone cluster for the whole session."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ethereal_kafka.runtime.jvm import TEST_DRIVER_OPTIONS
from ethereal_kafka.testing.spark_cluster import StandaloneSparkCluster, daemon_pids

#: Workers (1 core, 1 GiB each) of the session's cluster: two, so a job can run on one executor or two (the
#: autoscaling tests scale between them); this machine has two cores.
CLUSTER_WORKERS = 2


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneSparkCluster]:
    """A master and two 1-core/1 GiB workers on 127.0.0.1, started once for the whole session (when a test first
    asks for it), its JVMs (executors included) on the test kit's lean profile; torn down at the end (SIGTERM,
    then SIGKILL, per process group) with a check that no JVM or
    Python worker of it is left. Each test's jobs are applications of their own: their executors end with them."""
    state = tmp_path_factory.mktemp("spark-standalone")
    cluster = StandaloneSparkCluster(
        state, workers=CLUSTER_WORKERS, cores=1, memory="1g", java_options=TEST_DRIVER_OPTIONS
    )
    began = time.monotonic()
    try:
        cluster.start()
        print(
            f"\n[cluster] master {cluster.master_url} and {CLUSTER_WORKERS} workers up in {time.monotonic() - began:.1f}s"
        )
        yield cluster
    finally:
        cluster.stop()
        assert cluster.leftover_pids() == [], "a process of the cluster (executor, Python worker) survived"
        assert daemon_pids(state) == [], "a master or worker JVM survived"
        print(f"[cluster] stopped, nothing left running; cluster lifetime {time.monotonic() - began:.1f}s")
