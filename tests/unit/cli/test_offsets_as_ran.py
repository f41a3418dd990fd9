"""`offsets APP` and `replay APP` reach the cluster the app ran against, from any shell, and give up on a cluster
that is not there in about a second (issue 24, item 4: from a shell without KAFKA_BOOTSTRAP `offsets APP` hung 54 s
on 127.0.0.1:9092). No broker: the recorded address refuses, and the error line names it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.apps import RECORD_FILE, app_dir, record_run
from ethereal_kafka.cli import main
from ethereal_kafka.config.job import load_job


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(cache))
    return cache


def write_job(folder: Path) -> Path:
    for name, kind, topic in (("in", "kafka-source", "topics=orders"), ("out", "kafka-sink", "topic=out")):
        (folder / f"{name}.properties").write_text(
            f"connector.class={kind}\nname={name}\nbootstrap.servers=${{KAFKA_BOOTSTRAP:-127.0.0.1:9092}}\n"
            f"{topic}\nkafka.sasl.password=${{KAFKA_PASSWORD:-}}\n"
        )
    job = folder / "job.properties"
    job.write_text(
        f"app.id=shop\nsources=in.properties\nsinks=out.properties\npipeline=m:f\ncheckpoint.location={folder}/cp\n"
    )
    return job


@pytest.mark.parametrize(
    "command", [["offsets", "shop"], ["replay", "shop", "--from", "earliest", "--dry-run"]]
)
def test_the_app_is_looked_up_where_it_ran_from_a_shell_without_its_variables(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    refused_address: str,
) -> None:
    address = refused_address
    monkeypatch.setenv("KAFKA_BOOTSTRAP", address)
    monkeypatch.setenv("KAFKA_PASSWORD", "hunter2")
    record_run(load_job(write_job(tmp_path)), "instance-1")
    monkeypatch.delenv("KAFKA_BOOTSTRAP")  # another shell
    began = time.monotonic()
    code = main(command)
    elapsed = time.monotonic() - began
    assert code == 1
    assert capsys.readouterr().err == (
        f"error: Kafka at {address} is not reachable: Connect to ipv4#{address} failed: Connection refused\n"
    )
    assert elapsed < 4, f"{elapsed:.1f}s to give up on a refused port"


def test_the_run_record_keeps_addresses_and_variables_but_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "10.1.2.3:9092")
    monkeypatch.setenv("KAFKA_PASSWORD", "hunter2")
    record_run(load_job(write_job(tmp_path)), "instance-1")
    text = (app_dir("shop") / RECORD_FILE).read_text()
    assert "hunter2" not in text and "KAFKA_PASSWORD" not in text
    record = json.loads(text)
    assert record["env"] == {"KAFKA_BOOTSTRAP": "10.1.2.3:9092"}
    assert record["clusters"] == {"in": "10.1.2.3:9092", "out": "10.1.2.3:9092"}
