"""The Python worker daemon's preload (`runtime.worker_daemon.preload`)."""

from __future__ import annotations

import sys

from ethereal_kafka.runtime import worker_daemon


def test_every_module_the_workers_share_is_importable() -> None:
    assert worker_daemon.preload("pyspark.worker") == []
    assert "ethereal_kafka.connectors.kafka.transactional" in sys.modules


def test_a_module_that_cannot_be_imported_is_reported_not_raised() -> None:
    assert worker_daemon.preload("pyspark_no_such_worker") == ["pyspark_no_such_worker"]
