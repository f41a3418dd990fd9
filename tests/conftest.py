"""Shared test configuration: integration tests are marked by folder; tests that share an expensive fixture are
kept on one pytest-xdist worker.

`make test` runs the suite on two xdist workers (`-n 2 --dist loadgroup`). Each worker is a process of its own with
its own session fixtures: its own broker, SparkSession and (when a test asks for one) Spark standalone cluster or
3-node Kafka cluster, so a test that stops and restarts its broker disturbs no test of the other worker. Tests that
use the session's Spark cluster, the 3-node Kafka cluster (`kafka_cluster3`), or a module-scoped fixture, are put in
one `xdist_group` so that the fixture is built once.
"""

from __future__ import annotations

import pytest

#: Modules whose tests share a module-scoped fixture: each runs on one xdist worker.
_ONE_WORKER_MODULES = ("test_ui.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
        fixtures = getattr(item, "fixturenames", ())
        if "spark_cluster" in fixtures:
            item.add_marker(pytest.mark.xdist_group("spark-cluster"))
        elif "kafka_cluster3" in fixtures:
            item.add_marker(pytest.mark.xdist_group("kafka-cluster3"))
        elif item.path.name in _ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
