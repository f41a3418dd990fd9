"""`run_job`'s environment: a pipeline module beside the job file reaches the workers' PYTHONPATH (no Spark)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ethereal_kafka.testing.jobs import _workers_path


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    (tmp_path / "my_jobs").mkdir()
    (tmp_path / "flat_module.py").write_text("")
    path = tmp_path / "job.properties"
    path.write_text("")
    return path


def test_a_module_beside_the_job_file_goes_first(job: Path) -> None:
    expected = {"PYTHONPATH": os.pathsep.join([str(job.parent), "/elsewhere"])}
    assert _workers_path(job, "my_jobs.orders:build", {}) == expected
    assert _workers_path(job, "flat_module:build", {}) == expected


def test_nothing_changes_when_the_workers_find_it_already(job: Path) -> None:
    assert _workers_path(job, "elsewhere_module:build", {}) == {}
    assert _workers_path(job, None, {}) == {}
    assert _workers_path(job, "my_jobs.orders:build", {"PYTHONPATH": str(job.parent)}) == {}
