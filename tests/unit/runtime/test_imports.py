"""Where a job's pipeline module is imported from: the job's folder, then the working directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ethereal_kafka.runtime.imports import export_to_workers, make_importable, search_path


def test_search_path_is_the_job_folder_then_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").mkdir()
    assert search_path("jobs/job.properties") == [str(tmp_path / "jobs"), str(tmp_path)]
    assert search_path(tmp_path / "job.properties") == [str(tmp_path)]
    assert search_path(None) == [str(tmp_path)]


def test_make_importable_puts_the_job_folder_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", ["/somewhere", str(tmp_path / "jobs")])
    monkeypatch.chdir(tmp_path)
    make_importable(tmp_path / "jobs" / "job.properties")
    make_importable(tmp_path / "jobs" / "job.properties")
    assert sys.path == [str(tmp_path / "jobs"), str(tmp_path), "/somewhere"]


def test_export_to_workers_prepends_to_pythonpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM Spark starts next inherits this variable and hands it to its Python workers."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/opt/lib", str(tmp_path)]))
    export_to_workers(tmp_path / "jobs" / "job.properties")
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "jobs"), str(tmp_path), "/opt/lib"]
