"""The environment variables a job's files read: recorded by `run` (secrets left out), applied again by `offsets` and
`replay` (issue 24, item 4)."""

from __future__ import annotations

from pathlib import Path

from ethereal_kafka.config.job import load_job
from ethereal_kafka.config.properties import referenced_variables
from ethereal_kafka.config.variables import job_variables, recorded_environment


def write_job(folder: Path) -> Path:
    (folder / "in.properties").write_text(
        "connector.class=kafka-source\nname=orders\nbootstrap.servers=${KAFKA_BOOTSTRAP:-127.0.0.1:9092}\n"
        "topics=${TOPIC}\nkafka.sasl.password=${KAFKA_PASSWORD:-}\nkafka.security.protocol=${PROTOCOL:-PLAINTEXT}\n"
    )
    (folder / "out.properties").write_text(
        "connector.class=kafka-sink\nname=out\nbootstrap.servers=${KAFKA_BOOTSTRAP:-127.0.0.1:9092}\ntopic=out\n"
    )
    job = folder / "job.properties"
    job.write_text(
        "app.id=shop\nsources=in.properties\nsinks=out.properties\npipeline=m:f\n"
        "checkpoint.location=${STATE:-/tmp}/shop\n"
    )
    return job


def test_referenced_variables_per_key() -> None:
    text = "a=${X}\nb=x${Y:-1}${Z}\nc=$${NOT}\nd=plain\n"
    assert referenced_variables(text) == {"a": ["X"], "b": ["Y", "Z"]}


def test_the_job_files_variables_are_recorded_unset_as_none_and_secrets_left_out(tmp_path: Path) -> None:
    env = {
        "KAFKA_BOOTSTRAP": "10.0.0.7:9092",
        "TOPIC": "orders",
        "KAFKA_PASSWORD": "hunter2",
        "HOME": "/root",
    }
    loaded = load_job(write_job(tmp_path), env)
    recorded = job_variables(loaded, env)
    assert recorded == {
        "STATE": None,
        "KAFKA_BOOTSTRAP": "10.0.0.7:9092",
        "TOPIC": "orders",
        "PROTOCOL": None,
    }
    assert "hunter2" not in repr(recorded)


def test_a_variable_read_by_a_secret_key_anywhere_is_left_out(tmp_path: Path) -> None:
    job = write_job(tmp_path)
    sink = tmp_path / "out.properties"
    sink.write_text(sink.read_text() + "kafka.sasl.username=${TOPIC}\n")
    env = {"TOPIC": "orders"}
    assert "TOPIC" not in job_variables(load_job(job, env), env)


def test_the_recorded_environment_wins_over_this_shell() -> None:
    shell = {"KAFKA_BOOTSTRAP": "127.0.0.1:1", "PROTOCOL": "SSL", "KAFKA_PASSWORD": "from-shell"}
    recorded = {"KAFKA_BOOTSTRAP": "10.0.0.7:9092", "PROTOCOL": None}
    assert recorded_environment(recorded, shell) == {
        "KAFKA_BOOTSTRAP": "10.0.0.7:9092",
        "KAFKA_PASSWORD": "from-shell",
    }
