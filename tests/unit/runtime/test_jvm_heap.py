"""The heap options an embedded driver JVM gets unless the job's own Java options say otherwise."""

from __future__ import annotations

import pytest

from ethereal_kafka.runtime.jvm import LEAN_HEAP_OPTIONS, OPTIONS_ENV, OPTIONS_KEY, with_lean_heap


@pytest.fixture(autouse=True)
def _no_env_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OPTIONS_ENV, raising=False)


def test_a_session_without_java_options_gets_the_lean_heap() -> None:
    assert with_lean_heap({"spark.app.name": "x"}) == {
        "spark.app.name": "x",
        OPTIONS_KEY: " ".join(LEAN_HEAP_OPTIONS),
    }


def test_the_jobs_own_sizes_are_kept_and_the_rest_added() -> None:
    options = with_lean_heap({OPTIONS_KEY: "-Dlog=1 -Xms1g -XX:MaxNewSize=256m"})[OPTIONS_KEY]
    assert options == "-Dlog=1 -Xms1g -XX:MaxNewSize=256m -XX:+UseSerialGC"


def test_another_collector_gets_nothing_added(monkeypatch: pytest.MonkeyPatch) -> None:
    assert with_lean_heap({OPTIONS_KEY: "-XX:+UseG1GC"}) == {OPTIONS_KEY: "-XX:+UseG1GC"}
    monkeypatch.setenv(OPTIONS_ENV, "-XX:+UseParallelGC")
    assert with_lean_heap({}) == {}


def test_options_in_the_environment_count_as_the_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPTIONS_ENV, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    assert with_lean_heap({})[OPTIONS_KEY] == "-Xmn48m -Xms128m"
