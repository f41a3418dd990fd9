"""`offsets APP` from a shell without the variables the app ran with reaches the app's cluster (issue 24, item 4):
the run record keeps the environment its job files read. The real broker; no Spark (the record is written as `run`
writes it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.apps import record_run
from ethereal_kafka.cli import main
from ethereal_kafka.config.job import load_job
from ethereal_kafka.connectors.kafka.topics import produce
from ethereal_kafka.testing import KafkaCluster
from ethereal_kafka.testing.plugin import TopicFactory


def test_offsets_app_reads_the_cluster_the_app_ran_against(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(tmp_path / "cache"))
    source, sink = topic_factory(partitions=2), topic_factory()
    produce(kafka_cluster.bootstrap, source, [(None, b"{}")] * 5, partition=1)
    for name, kind, topics in (
        ("in", "kafka-source", f"topics={source}"),
        ("out", "kafka-sink", f"topic={sink}"),
    ):
        (tmp_path / f"{name}.properties").write_text(
            f"connector.class={kind}\nname={name}\nbootstrap.servers=${{KAFKA_BOOTSTRAP:-127.0.0.1:9092}}\n{topics}\n"
        )
    job = tmp_path / "job.properties"
    job.write_text(
        f"app.id=as-ran-{source}\nsources=in.properties\nsinks=out.properties\npipeline=m:f\n"
        f"checkpoint.location={tmp_path}/checkpoint\n"
    )
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_cluster.bootstrap)
    record_run(load_job(job), "instance-1")  # what `run` writes as it starts
    monkeypatch.delenv("KAFKA_BOOTSTRAP")  # another shell: 127.0.0.1:9092 by the file's default
    capsys.readouterr()
    assert main(["offsets", f"as-ran-{source}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"app as-ran-{source}: 2 input partition(s), total lag -"
    assert [line.split()[2:6] for line in lines[3:5]] == [[source, "0", "-", "0"], [source, "1", "-", "5"]]
