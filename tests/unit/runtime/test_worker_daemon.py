"""The Python worker daemon's preload (`runtime.worker_daemon.preload`)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from ethereal_kafka.runtime import worker_daemon


def test_every_module_the_workers_share_is_importable() -> None:
    assert worker_daemon.preload("pyspark.worker") == []
    assert "ethereal_kafka.eos.phase_one" in sys.modules


def test_a_module_that_cannot_be_imported_is_reported_not_raised() -> None:
    assert worker_daemon.preload("pyspark_no_such_worker") == ["pyspark_no_such_worker"]


def test_the_daemon_freezes_what_it_imported_before_it_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import daemon

    frozen_at_start: list[int] = []
    monkeypatch.setattr(daemon, "manager", lambda: frozen_at_start.append(gc.get_freeze_count()))
    monkeypatch.setattr(sys, "argv", ["worker_daemon", "pyspark.worker"])
    try:
        worker_daemon.main()
    finally:
        gc.unfreeze()
    assert frozen_at_start and frozen_at_start[0] > 0


def test_a_forked_worker_imports_nothing_new_when_it_builds_its_first_arrow_arrays() -> None:
    """Whatever a worker imports on its first batch, it imports after the fork: CPU and private memory in every
    worker. pyarrow imports pandas on its first conversion of a Python list (its pandas-object check)."""
    probe = (
        "import sys; from ethereal_kafka.runtime import worker_daemon as d; assert d.preload('pyspark.worker') == []\n"
        "import pyarrow as pa, pyarrow.compute as pc; before = set(sys.modules)\n"
        "pc.fill_null(pa.array([1, None], pa.timestamp('us', tz='UTC')), 0); pa.array([b'x'], pa.binary())\n"
        "print(sorted(m for m in set(sys.modules) - before if not m.startswith('_')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_job_without_pandas_hides_it_from_the_daemon_and_its_arrow_conversions() -> None:
    """`ETHEREAL_KAFKA_WORKER_PANDAS=0` (a `transform.sql` job): pandas is neither preloaded nor imported by pyarrow
    when a worker converts Python values, and an explicit import fails as if pandas were not installed."""
    probe = (
        "import sys; from ethereal_kafka.runtime import worker_daemon as d; assert d.preload('pyspark.worker') == []\n"
        "import pyarrow as pa, pyarrow.compute as pc\n"
        "pc.fill_null(pa.array([1, None], pa.timestamp('us', tz='UTC')), 0); pa.array([b'x'], pa.binary())\n"
        "pa.RecordBatch.from_pydict({'v': [1.5, None]})\n"
        "try:\n    import pandas\nexcept ImportError:\n    print('hidden', 'pandas' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, worker_daemon.PANDAS_ENV: "0"},
    )
    assert done.stdout.strip() == "hidden False"


def test_a_transform_sql_run_hides_pandas_only_from_the_jvm_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run` sets `PANDAS_ENV=0` while its driver JVM starts and takes it back after: a later session or child of
    the same process (the demo, a test process) keeps pandas; a value the user set stays as it is."""
    from ethereal_kafka.runtime.runner import _launch_environment

    monkeypatch.delenv(worker_daemon.PANDAS_ENV, raising=False)
    with _launch_environment({worker_daemon.PANDAS_ENV: "0"}):
        assert os.environ[worker_daemon.PANDAS_ENV] == "0"
    assert worker_daemon.PANDAS_ENV not in os.environ
    monkeypatch.setenv(worker_daemon.PANDAS_ENV, "1")
    with _launch_environment({worker_daemon.PANDAS_ENV: "0"}):
        assert os.environ[worker_daemon.PANDAS_ENV] == "1"
    assert os.environ[worker_daemon.PANDAS_ENV] == "1"
