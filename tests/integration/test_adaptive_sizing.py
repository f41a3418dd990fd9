"""Adaptive epoch sizing on the real broker, in-process on the session's SparkSession: epochs of varying size, and
a replay that reads exactly the logged range whatever the sizer decides meanwhile, so the output is byte for byte
what the logged epoch boundaries determine."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ethereal_kafka.config.job import LoadedJob, load_job
from ethereal_kafka.connectors.kafka.admission import budget_path, post_budget, read_budget, read_history
from ethereal_kafka.connectors.kafka.topics import ReadRecord, read_committed
from ethereal_kafka.examples import eos
from ethereal_kafka.runtime.run_metrics import RunMetrics, open_metrics
from ethereal_kafka.runtime.runner import close_clients, job_sources, start
from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.epochs import Epoch, read_epochs, split_by_epochs
from ethereal_kafka.testing.plugin import TopicFactory
from tests.integration.eos_helpers import feed, output, write_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.timeout(300)


def _sizes(epochs: list[Epoch], starts: dict[tuple[str, int], int]) -> list[int]:
    """Offsets each epoch admitted (summed over partitions)."""
    sizes, before = [], dict(starts)
    for epoch in epochs:
        ends = epoch.ends[0]
        sizes.append(sum(end - before.get(tp, 0) for tp, end in ends.items()))
        before = dict(ends)
    return sizes


def _expected(inputs: list[ReadRecord], epochs: list[Epoch]) -> list[list[tuple[bytes, bytes]]]:
    """Per logged epoch, the running-total updates it determines (one per key with events in the epoch), in key
    order: a plain-Python reference of `eos.running_total` over the logged boundaries."""
    out = []
    counts: dict[str, int] = defaultdict(int)
    totals: dict[str, int] = defaultdict(int)
    for chunk in split_by_epochs(inputs, lambda r: (r.topic, r.partition, r.offset), epochs):
        touched = set()
        for record in chunk:
            event = json.loads(record.value or b"")
            counts[event["key"]] += 1
            totals[event["key"]] += event["amount"]
            touched.add(event["key"])
        updates = []
        for key in sorted(touched):
            value = {"key": key, "count": counts[key], "total": totals[key]}
            updates.append((key.encode(), json.dumps(value, separators=(",", ":")).encode()))
        out.append(updates)
    return out


def _job(
    bs: str, topics: TopicFactory, folder: Path, events: int, pipeline: str, max_records: int, extra: str
) -> tuple[LoadedJob, str, str]:
    """Feed `events` events into a new 2-partition topic and write a job reading it; the job, source, sink."""
    src, dst = topics(partitions=2), topics(partitions=2)
    feed(bs, src, eos.events(events), 2)
    files = write_job(folder, bs, src, dst, pipeline, max_records=max_records, extra_job=extra)
    return load_job(files.job), src, dst


def _run_to_the_end(spark: SparkSession, loaded: LoadedJob, metrics: RunMetrics | None = None) -> float:
    """Run the job in-process until its input at start is consumed (`availableNow`); returns the seconds taken."""
    began = time.monotonic()
    running, coordinator = start(spark, loaded, available_now=True, metrics=metrics)
    try:
        running.await_termination(240)
    finally:
        running.stop()
        running.close()
        coordinator.close()
        close_clients()
    return time.monotonic() - began


def _run_until_refused(spark: SparkSession, loaded: LoadedJob, committed: int) -> int:
    """Run the job until `committed` epochs committed, then close the coordinator's gate: the next epoch Spark
    plans is logged but refused (it writes nothing). Returns the refused epoch."""
    running, coordinator = start(spark, loaded)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            last = coordinator.gate.last().get("out")
            if last is not None and last.committed and last.epoch >= committed - 1:
                break
            time.sleep(0.05)
        coordinator.gate.close()
        while time.monotonic() < deadline and not coordinator.gate.refused():
            time.sleep(0.05)
        ((_, refused),) = coordinator.gate.refused()
        return refused
    finally:
        running.stop()
        running.close()
        coordinator.close()


def test_a_replayed_epoch_reads_its_logged_range_whatever_the_sizer_posts_since(
    kafka_cluster: KafkaCluster, spark: SparkSession, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap
    loaded, src, dst = _job(
        bs,
        topic_factory,
        tmp_path,
        3000,
        "ethereal_kafka.examples.eos:running_total",
        0,
        "epoch.min.records=100\nepoch.max.records=1500\nepoch.target.ms=3000\nmetrics.enabled=false\nprogress=off\n",
    )
    query = Path(loaded.job.checkpoint_location) / "out"
    refused = _run_until_refused(spark, loaded, committed=3)
    logged = (query / "offsets" / str(refused)).read_text()
    assert not (query / "commits" / str(refused)).exists(), "the refused epoch is logged, not committed"
    # The sizer now posts a budget far from the refused epoch's size: the replay must not care.
    budget = budget_path(job_sources(loaded, False)["events"])
    assert budget is not None and read_budget(budget) is not None
    refused_size = _sizes(read_epochs(query), {})[refused]
    other = 1500 if refused_size < 750 else 100
    post_budget(budget, other, None, "test: a different decision", read_history(budget))

    second = _run_to_the_end(spark, loaded)

    assert (query / "offsets" / str(refused)).read_text() == logged, "the replay re-planned the logged epoch"
    epochs = read_epochs(query)
    sizes = _sizes(epochs, {})
    inputs = read_committed(bs, src)
    assert sum(sizes) == len(inputs) == 3000
    assert len(set(sizes[:-1])) >= 3, f"epoch sizes did not vary: {sizes}"
    records = output(bs, dst)
    partition_of: dict[bytes, set[int]] = defaultdict(set)
    by_partition: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    for record in records:
        partition_of[record.key or b""].add(record.partition)
        by_partition[record.partition].append((record.key or b"", record.value or b""))
    assert all(len(p) == 1 for p in partition_of.values()), "a key's updates all go to one partition"
    # Byte for byte, per output partition: the logged epochs in order, each epoch's updates in key order.
    want: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    for updates in _expected(inputs, epochs):
        for key, value in updates:
            want[min(partition_of.get(key, {-1}))].append((key, value))
    assert dict(by_partition) == dict(want), "output differs from what the logged epochs determine"
    print(
        f"epoch sizes {sizes}; refused and replayed epoch {refused} ({refused_size} offsets, budget posted "
        f"{other}); second run {second:.1f}s"
    )


def test_local_mode_autoscaling_logs_what_it_would_do_and_changes_nothing(
    kafka_cluster: KafkaCluster,
    spark: SparkSession,
    topic_factory: TopicFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bs = kafka_cluster.bootstrap
    loaded, _, dst = _job(
        bs,
        topic_factory,
        tmp_path,
        1500,
        "ethereal_kafka.examples.eos:stateless",
        300,
        "epoch.sizing=fixed\nautoscale.policy=lag\nautoscale.scale.up.lag=600\nautoscale.scale.down.lag=10\n"
        "autoscale.max.executors=3\nautoscale.interval.ms=200\nautoscale.scale.up.cooldown.ms=0\nprogress=off\n",
    )
    caplog.set_level("INFO", logger="ethereal_kafka.runtime.autoscaler")
    metrics = open_metrics(spark, loaded)
    try:
        _run_to_the_end(spark, loaded, metrics)
        assert metrics.metrics is not None
        decisions = metrics.metrics.scaling_decisions()
    finally:
        metrics.close()
    ups = [d for d in decisions if d["action"] == "scale-up"]
    assert ups, f"a backlog of 1500 records over 300-record epochs never looked like lag: {decisions}"
    assert all(d["applied"] is False for d in decisions)
    assert max(d["executors_after"] for d in decisions) <= 3
    assert "autoscale (local mode: nothing changes): would scale-up 1 -> 2 executors: lag" in caplog.text
    assert spark.sparkContext._jsc.sc().getExecutorIds().size() == 0, "local mode has no executors to change"
    assert len(output(bs, dst)) == len(eos.stateless_reference(eos.events(1500)))
    print(f"local-mode decisions: {[(d['action'], d['executors_after'], d['reason']) for d in decisions]}")
