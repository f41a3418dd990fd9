"""Shared test configuration: integration tests are marked by folder; tests that share an expensive fixture are
kept on one pytest-xdist worker.

`make test` runs the suite on three xdist workers (`-n 3 --dist loadgroup`). Each worker is a process of its own with
its own session fixtures: its own broker, SparkSession and (when a test asks for one) Spark standalone cluster or
3-node Kafka cluster, so a test that stops and restarts its broker disturbs no test of the other worker. Tests that
use the session's Spark cluster, the 3-node Kafka cluster (`kafka_cluster3`), or a module-scoped fixture, are put in
one `xdist_group` so that the fixture is built once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ports import refused_address as _refused_address

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


#: Session fixtures only one xdist group's tests use: the cluster processes (three broker JVMs holding ~1.2 GB and
#: ~6 % of a core while idle; a Spark master and workers) are stopped once their worker has run the group's last
#: test, instead of idling until the session ends. xdist sends a group's tests to one worker together, so they run
#: one after the other; a test that asks for the fixture later starts it again.
_RELEASED_AFTER_THEIR_TESTS = ("kafka_cluster3", "spark_cluster")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    result = yield
    if nextitem is not None:  # after the last test, the session's own teardown stops them
        for name in _RELEASED_AFTER_THEIR_TESTS:
            if name in getattr(item, "fixturenames", ()) and name not in getattr(
                nextitem, "fixturenames", ()
            ):
                _finish_fixture(item, name)
    return result


def _finish_fixture(item: pytest.Item, name: str) -> None:
    """Run the finalizers of session fixture `name` now (its teardown and checks, as at the session's end); the next
    request builds it anew. Uses pytest's `FixtureDef.finish` (the call pytest makes at the end of a scope)."""
    internal: Any = item  # a pytest.Function: its fixture info and request are pytest's own attributes
    definitions = internal._fixtureinfo.name2fixturedefs.get(name)
    if definitions:
        definitions[-1].finish(internal._request)
        os.write(2, f"\n[{name}] stopped after its last test ({item.nodeid})\n".encode())


@pytest.fixture
def refused_address() -> Iterator[str]:
    """`127.0.0.1:port` of a port bound for the test and never listening: a client's connects are refused, and no
    other process can take the port meanwhile (`tests.ports`)."""
    with _refused_address() as address:
        yield address
