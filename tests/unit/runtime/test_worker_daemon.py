"""The Python worker daemon's output routing (`runtime.worker_daemon.route_output`), in a forked child as PySpark's
daemon runs a worker."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from ethereal_kafka.runtime import worker_daemon


@pytest.fixture
def fake_worker(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("pyspark_fake_worker")

    def main(infile: object, outfile: object) -> None:
        print("Starting Streaming TransformWithStateInPandas Python worker.\n")
        print("to stderr", file=sys.stderr)

    module.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyspark_fake_worker", module)
    return module


def _run_forked(module: types.ModuleType) -> None:
    pid = os.fork()
    if pid == 0:  # the child exits as PySpark's forked workers do: os._exit, nothing flushed at exit
        try:
            module.main(None, None)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def test_a_forked_workers_output_goes_to_the_log_folder(
    fake_worker: types.ModuleType, tmp_path: Path
) -> None:
    assert worker_daemon.route_output("pyspark_fake_worker", str(tmp_path))
    _run_forked(fake_worker)
    text = (tmp_path / worker_daemon.WORKER_OUTPUT_FILE).read_text()
    assert "TransformWithStateInPandas Python worker" in text
    assert "to stderr" in text


def test_without_a_folder_or_a_module_nothing_is_wrapped(fake_worker: types.ModuleType) -> None:
    original = fake_worker.main
    assert not worker_daemon.route_output("pyspark_fake_worker", None)
    assert not worker_daemon.route_output("pyspark_no_such_worker", "/tmp")
    assert fake_worker.main is original
