"""The run record and the run lock: what `offsets`/`replay` know about an app on this host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint import apps
from ethereal_kafka.checkpoint.errors import AppRunningError
from ethereal_kafka.config.job import LoadedJob, load_job


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(cache))
    return cache


def _job(tmp_path: Path, checkpoint: str = "ckpt") -> LoadedJob:
    (tmp_path / "src.properties").write_text(
        "connector.class=kafka-source\nname=events\nbootstrap.servers=localhost:1\ntopics=in\n"
        "kafka.sasl.password=hunter2\n"
    )
    (tmp_path / "sink.properties").write_text(
        "connector.class=kafka-sink\nname=out\nbootstrap.servers=localhost:1\ntopic=out\n"
    )
    (tmp_path / "job.properties").write_text(
        "app.id=shop\nsources=src.properties\nsinks=sink.properties\npipeline=m:f\n"
        f"checkpoint.location={checkpoint}\n"
    )
    return load_job(tmp_path / "job.properties")


def test_run_record_round_trips_with_absolute_paths_and_no_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    record = apps.record_run(_job(tmp_path), "inst-1")
    assert apps.read_run_record("shop") == record
    assert record.job_file == str(tmp_path / "job.properties")
    assert record.checkpoint_location == str(tmp_path / "ckpt"), "relative to where `run` ran"
    assert record.pid == os.getpid() and record.instance_id == "inst-1"
    text = (home / "apps" / "shop" / "job.json").read_text()
    assert "hunter2" not in text and "bootstrap" not in text
    assert apps.read_run_record("unknown") is None


def test_uri_checkpoints_are_recorded_as_given(tmp_path: Path) -> None:
    assert apps.record_run(_job(tmp_path, "hdfs://nn/ckpt"), "i").checkpoint_location == "hdfs://nn/ckpt"


def test_a_held_run_lock_makes_replay_refuse_until_released() -> None:
    assert apps.try_run_lock("shop")
    assert apps.try_run_lock("shop")  # idempotent in one process
    try:
        with (
            pytest.raises(AppRunningError, match="app shop is running on this host"),
            apps.exclusive_run_lock("shop"),
        ):
            pass
    finally:
        apps.release_run_lock("shop")
    with apps.exclusive_run_lock("shop"):
        pass


def _instance_holding_the_lock(home: Path) -> subprocess.Popen[str]:
    """A child process that holds the app's run lock (as a running instance does) until killed."""
    script = textwrap.dedent(
        """
        import sys, time
        from ethereal_kafka.checkpoint.apps import try_run_lock
        print("held" if try_run_lock("shop") else "busy", flush=True)
        time.sleep(60)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "ETHEREAL_KAFKA_HOME": str(home)},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_one_instance_holds_the_lock_and_a_starting_one_can_tell_a_replay_from_it(home: Path) -> None:
    child = _instance_holding_the_lock(home)
    try:
        assert not apps.try_run_lock("shop"), "a second instance does not get the lock"
        assert not apps.replay_in_progress("shop"), "and sees an instance, not a replay, holding it"
    finally:
        child.kill()
        child.wait(timeout=10)
    with apps.exclusive_run_lock("shop"):
        assert apps.replay_in_progress("shop")
        assert not apps.try_run_lock("shop")
    assert apps.try_run_lock("shop")
    apps.release_run_lock("shop")


def test_a_killed_instance_leaves_no_stale_lock(home: Path) -> None:
    child = _instance_holding_the_lock(home)
    try:
        with pytest.raises(AppRunningError), apps.exclusive_run_lock("shop"):
            pass
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    deadline = time.monotonic() + 5
    while True:
        try:
            with apps.exclusive_run_lock("shop"):
                break
        except AppRunningError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
