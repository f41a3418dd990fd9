"""The Python worker daemon's preload (`runtime.worker_daemon.preload`)."""

from __future__ import annotations

import gc
import sys

import pytest

from ethereal_kafka.runtime import worker_daemon


def test_every_module_the_workers_share_is_importable() -> None:
    assert worker_daemon.preload("pyspark.worker") == []
    assert "ethereal_kafka.connectors.kafka.transactional" in sys.modules


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
