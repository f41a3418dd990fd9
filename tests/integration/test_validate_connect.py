"""`ethereal-kafka validate --connect` asks the real broker whether it answers and has every topic (real processes)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

CLI = str(Path(sys.executable).parent / "ethereal-kafka")


def _job(folder: Path, bootstrap: str, source_topic: str, sink_topic: str) -> Path:
    (folder / "in.properties").write_text(
        f"connector.class=kafka-source\nname=orders\nbootstrap.servers={bootstrap}\ntopics={source_topic}\n"
    )
    (folder / "out.properties").write_text(
        f"connector.class=kafka-sink\nname=out\nbootstrap.servers={bootstrap}\ntopic={sink_topic}\n"
    )
    job = folder / "job.properties"
    job.write_text(
        "app.id=connect-check\nsources=in.properties\nsinks=out.properties\n"
        f"transform.sql=SELECT key, value FROM orders\ncheckpoint.location={folder / 'checkpoint'}\n"
    )
    return job


def _validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "validate", "--connect", "--no-plan", *args], capture_output=True, text=True, timeout=60
    )


def test_connect_passes_when_every_topic_exists(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    job = _job(tmp_path, kafka_bootstrap, topic_factory(), topic_factory())
    done = _validate(str(job))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{job}: ok (job 'connect-check'") and done.stderr == ""


def test_connect_names_the_missing_topic_its_file_and_the_address(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    job = _job(tmp_path, kafka_bootstrap, topic_factory(), "no-such-topic-validate")
    done = _validate(str(job))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: {tmp_path / 'out.properties'}: topic 'no-such-topic-validate' does not exist at {kafka_bootstrap}"
    ]
    # Without --connect nothing is contacted, and the same job is valid.
    offline = subprocess.run(
        [CLI, "validate", "--no-plan", str(job)], capture_output=True, text=True, timeout=60
    )
    assert offline.returncode == 0, offline.stderr


def test_connect_names_a_refused_address_at_once(tmp_path: Path, refused_address: str) -> None:
    """A refused port fails in about a second, not after the timeout (issue 24: 16 s before)."""
    address = refused_address
    job = _job(tmp_path, address, "orders", "out")
    began = time.monotonic()
    done = _validate("--timeout", "30", str(job))
    elapsed = time.monotonic() - began
    assert done.returncode == 1
    [line] = done.stderr.splitlines()  # librdkafka's own connection lines stay off the terminal
    assert line == (
        f"error: {tmp_path / 'in.properties'}, {tmp_path / 'out.properties'}: Kafka at {address} is not "
        f"reachable: Connect to ipv4#{address} failed: Connection refused"
    )
    assert elapsed < 25, f"validate took {elapsed:.1f}s to give up on a refused port"


def test_run_with_a_wrong_bootstrap_ends_with_one_line_at_once(tmp_path: Path, refused_address: str) -> None:
    """`run` makes the same check before Spark starts, bounded by `connect.timeout.ms` and shorter for a refused
    port; librdkafka's own lines go to the run's log file, not the terminal. No broker, no Spark."""
    address = refused_address
    job = _job(tmp_path, address, "orders", "out")
    job.write_text(job.read_text() + "connect.timeout.ms=30000\n")
    logs = tmp_path / "logs"
    began = time.monotonic()
    done = subprocess.run(
        [CLI, "run", str(job), "--log-dir", str(logs)], capture_output=True, text=True, timeout=60
    )
    elapsed = time.monotonic() - began
    assert done.returncode == 1
    [line] = done.stderr.splitlines()  # no librdkafka `Connect to ... failed` lines on the terminal
    assert line == (
        f"error: {tmp_path / 'in.properties'}, {tmp_path / 'out.properties'}: Kafka at {address} is not "
        f"reachable: Connect to ipv4#{address} failed: Connection refused"
    ), line
    assert elapsed < 25, f"run took {elapsed:.1f}s to refuse"
    assert f"Connect to ipv4#{address} failed" in (logs / "ethereal-kafka.log").read_text()
    assert not (tmp_path / "checkpoint").exists()  # nothing started
