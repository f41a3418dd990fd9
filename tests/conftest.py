"""Shared test configuration: integration tests are marked by folder; tests that share an expensive fixture are
kept on one pytest-xdist worker.

`make test` runs the suite on two xdist workers (`-n 2 --dist loadgroup`). Each worker is a process of its own with
its own session fixtures: its own broker, SparkSession and (when a test asks for one) Spark standalone cluster or
3-node Kafka cluster, so a test that stops and restarts its broker disturbs no test of the other worker. Tests that
use the session's Spark cluster, the 3-node Kafka cluster (`kafka_cluster3`), or a module-scoped fixture, are put in
one `xdist_group` so that the fixture is built once.
"""

from __future__ import annotations

import os

import pytest

#: Modules whose tests share a module-scoped fixture: each runs on one xdist worker.
_ONE_WORKER_MODULES = ("test_ui.py",)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
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


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Fail the run when `--dist loadgroup` would ignore the groups (each worker would build every shared fixture).

    xdist marks a grouped test by suffixing its node id with `@group`; it did not with pytest 9.2 (node ids are no
    longer stored where xdist 3.8 writes), nor when this file's hook ran after xdist's.
    """
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        message = (
            f"pytest-xdist ignores the xdist_group of {len(lost)} tests (e.g. {lost[0]}): shared fixtures would be "
            "built on every worker; check the pytest / pytest-xdist versions pinned in pyproject.toml"
        )
        # An xdist worker's exception reaches the report as a bare assertion; its stderr is the terminal's.
        os.write(2, f"\nERROR: {message}\n".encode())
        raise pytest.UsageError(message)
