"""The run's description shows the settings in force: the sources as the runner changed them (issue 24, item 9:
the job page showed `max.records.per.epoch=0`, `epoch.sizing=fixed` while the job ran adaptive with 50,000)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.config.job import LoadedJob, load_job
from ethereal_kafka.config.model import MASK
from ethereal_kafka.runtime.description import (
    RESUMABLE_FILE,
    ResumableRecorder,
    RunDescription,
    read_description,
)
from ethereal_kafka.runtime.runner import job_sources


def _job(folder: Path) -> LoadedJob:
    (folder / "in.properties").write_text(
        "connector.class=kafka-source\nname=in\nbootstrap.servers=localhost:1\ntopics=t\n"
        "kafka.sasl.password=hunter2\n"
    )
    (folder / "out.properties").write_text(
        "connector.class=kafka-sink\nname=out\nbootstrap.servers=localhost:1\ntopic=o\n"
    )
    (folder / "job.properties").write_text(
        "app.id=shop\nsources=in.properties\nsinks=out.properties\npipeline=m:f\nepoch.sizing=adaptive\n"
        f"epoch.max.records=50000\ncheckpoint.location={folder / 'ckpt'}\n"
    )
    return load_job(folder / "job.properties")


def test_the_description_shows_the_sources_as_they_run_and_what_the_file_said(tmp_path: Path) -> None:
    loaded = _job(tmp_path)
    sources = job_sources(loaded, fresh=True)
    described = RunDescription.of(loaded, {"queries": [], "nodes": [], "edges": []}, sources=sources)
    shown = described.config["sources"]["in"]
    assert shown["epoch.sizing"] == "adaptive"
    assert int(shown["max.records.per.epoch"]) == sources["in"].max_records_per_epoch <= 50_000
    assert int(shown["max.records.per.epoch"]) > 0
    assert shown["kafka.sasl.password"] == MASK and "hunter2" not in described.to_json()
    written = described.config["as_written"]["sources"]["in"]
    assert written["max.records.per.epoch"] == "0" and written["epoch.sizing"] == "fixed"
    assert "topics" not in written  # unchanged keys are not listed
    assert RunDescription.from_json(described.to_json()) == described


def _epoch(outcome: str) -> EpochRecord:
    return EpochRecord("shop", "c", 0, "exactly-once", {}, {}, 0, 0, 1, 0, 0, 1, outcome)


def test_the_resumable_version_is_recorded_at_the_first_committed_epoch_of_a_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(tmp_path / "home"))
    described = RunDescription.of(_job(tmp_path), {"queries": [], "nodes": [], "edges": []})
    recorder = ResumableRecorder(described)
    recorder("out", _epoch("failed"), [])
    assert read_description("shop", RESUMABLE_FILE) is None, "a start whose epoch failed is not resumable"
    recorder("out", _epoch("committed"), [])
    assert read_description("shop", RESUMABLE_FILE) == described
