"""Figures that add up, on a real job: two queries reading one source (one stateless, one windowed with a
watermark), run in-process. The run's summary counts each input record once, its outputs per sink as the topics
hold them, and the windowed query's watermark and state; the checkpoint history keeps the records each epoch read
(not the offsets, which include the input's transaction markers); `offsets` counts the topic's partitions once."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.cli import main
from ethereal_kafka.cli.checkpoints_cmd import render_table
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration.api_helpers import write_api_job
from tests.integration.eos_helpers import output

COUNT = 600
PARTITIONS = 2


def produce_in_one_transaction(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Produce `records` (partitioned by key) in one transaction: each partition ends with a commit marker, an
    offset that holds no record."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"feed-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=sum(key) % PARTITIONS)
    producer.commit_transaction(30)


def test_two_queries_reading_one_source_add_up(
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bs = kafka_cluster.bootstrap
    src, out_a, out_b = (topic_factory(partitions=PARTITIONS) for _ in range(3))
    inputs = eos.events(COUNT)
    produce_in_one_transaction(bs, src, inputs)
    job = write_api_job(
        tmp_path,
        bs,
        "tests.integration.pipelines_dataframe:copy_and_window",
        {"events": (src, "")},
        {"a": (out_a, ""), "b": (out_b, "")},
        max_records=300,
        # RocksDB counts its rows only when asked (`runtime.spark.TRACK_ROWS_KEY`; off by default, and the summary
        # then has no state line): the pass-through setting reaches the query's state stores.
        extra_job="spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows=true\n",
    )
    run = run_job(job.path)
    assert run.report is not None and run.report.summary is not None
    summary = run.report.summary
    print("\n".join(summary.lines()))

    # 1. Each input record once, however many queries read it; per query, each read it once.
    assert summary.records_in == COUNT
    assert summary.records_in_per_query == {"a": COUNT, "b": COUNT}
    # 2. The outputs as the topics hold them; every epoch committed.
    written_a, written_b = len(output(bs, out_a)), len(output(bs, out_b))
    assert written_a == len(eos.stateless_reference(inputs))
    assert written_b > 0
    assert summary.records_out == {("a", "a"): written_a, ("b", "b"): written_b}
    with CheckpointHistory(job.app_id, read_only=True) as history:
        records = history.records()
    committed = [r for r in records if r.outcome == "committed"]
    assert summary.epochs == {"committed": len(committed), "failed": 0, "interrupted": 0}
    assert summary.late == 0 and summary.dead_lettered == 0
    # 5. The windowed query's watermark (the newest event time seen minus the lateness bound, at most) and state.
    newest_ms = max(json.loads(value)["ts"] for _, value in inputs)
    assert set(summary.watermarks_s) == {"b"}
    assert 1_800_000_000 < summary.watermarks_s["b"] <= (newest_ms - eos.LATENESS_MS) / 1000
    assert set(summary.state_rows) == {"b"} and summary.state_rows["b"] > 0

    # 3. Per epoch: the records its read tasks read; the offsets also cover one commit marker per partition.
    read: dict[str, int] = defaultdict(int)
    advanced: dict[str, int] = defaultdict(int)
    for record in committed:
        assert record.records_read is not None, record
        read[record.query] += record.records_read
        advanced[record.query] += record.offsets_advanced or 0
    assert read == {"a": COUNT, "b": COUNT}
    assert advanced == {"a": COUNT + PARTITIONS, "b": COUNT + PARTITIONS}
    table = render_table(committed).splitlines()
    assert table[0].split()[:2] == ["QUERY", "EPOCH"]
    assert {line.split()[0] for line in table[1:]} == {"a", "b"}
    capsys.readouterr()
    assert main(["offsets", job.app_id]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith(
        f"app {job.app_id}: 2 input partition(s) (read by 2 queries, one consumer group each)"
    )
