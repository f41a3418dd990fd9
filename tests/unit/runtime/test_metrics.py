"""Metric bookkeeping (no Spark, no broker): attribution of read reports to epochs, end-to-end latency, outputs,
commit latency, progress reports, the Prometheus exposition and the endpoint."""

from __future__ import annotations

import random
import urllib.request
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.config.job import JobConfig
from ethereal_kafka.connectors.kafka.read_stats import ReadReport, ReadTally
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.runtime.metrics import (
    LATENCY_BUCKETS,
    PENDING_TTL_S,
    Histogram,
    JobMetrics,
)
from ethereal_kafka.runtime.run_metrics import serve

APP = "app1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def source(name: str = "events", topics: str = "orders") -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties(
        {"name": name, "bootstrap.servers": "127.0.0.1:9", "topics": topics}
    )


def metrics(clock: Any = None) -> JobMetrics:
    m = JobMetrics(APP, {"events": source()}, **({"clock": clock} if clock else {}))
    m.add_query("out", ["out"])
    return m


def record(
    epoch: int,
    start: dict[str, dict[str, int]],
    end: dict[str, dict[str, int]],
    records_out: int = 0,
    started_ms: int = 1_000_000,
    duration_ms: int = 500,
    outcome: str = "committed",
) -> EpochRecord:
    return EpochRecord(
        app_id=APP,
        checkpoint_id="c1",
        epoch=epoch,
        mode="partition-preserving",
        start_offsets=start,
        end_offsets=end,
        records_in=-1,
        records_out=records_out,
        tasks=0,
        skipped_tasks=0,
        started_ms=started_ms,
        duration_ms=duration_ms,
        outcome=outcome,
        error=None if outcome == "committed" else "boom",
    )


def report(partition: int, start: int, until: int, **kw: Any) -> ReadReport:
    fields: dict[str, Any] = {
        "source": "events",
        "topic": "orders",
        "partition": partition,
        "start": start,
        "until": until,
        "records": until - start,
        "dead_lettered": 0,
        "skipped": 0,
        "timestamped": 0,
        "timestamp_sum_ms": 0,
        "read_ms": 0,
        "ages": {},
    }
    fields.update(kw)
    return ReadReport(**fields)


def test_histogram_buckets_are_le_and_cumulative() -> None:
    h = Histogram((1.0, 2.0))
    h.observe(1.0)
    h.observe(1.5, 2)
    h.observe(9.0)
    assert h.buckets == [1, 2, 1]
    assert h.cumulative() == [("1.0", 1.0), ("2.0", 3.0), ("+Inf", 4.0)]
    assert (h.count, h.sum) == (4, 13.0)


def test_an_epoch_claims_exactly_the_reports_of_its_ranges() -> None:
    m = metrics()
    m.add_reports([report(0, 0, 10, dead_lettered=2), report(1, 0, 5, skipped=1), report(0, 10, 20)])
    m.observe_epoch("out", record(0, {"orders": {"0": 0, "1": 0}}, {"orders": {"0": 10, "1": 5}}))
    assert m.records_in[("out", "events")] == 15
    assert m.dead_lettered[("out", "events")] == 2
    assert m.skipped[("out", "events")] == 1
    m.observe_epoch("out", record(1, {"orders": {"0": 10, "1": 5}}, {"orders": {"0": 20, "1": 5}}))
    assert m.records_in[("out", "events")] == 25
    # Nothing is counted twice: an epoch over the same ranges (a replay in this process) finds no report left.
    m.observe_epoch("out", record(1, {"orders": {"0": 10, "1": 5}}, {"orders": {"0": 20, "1": 5}}))
    assert m.records_in[("out", "events")] == 25


def test_two_queries_reading_the_same_range_each_claim_their_own_report() -> None:
    m = metrics()
    m.add_query("other", ["other"])
    m.add_reports([report(0, 0, 10), report(0, 0, 10)])
    ends = record(0, {"orders": {"0": 0}}, {"orders": {"0": 10}})
    m.observe_epoch("out", ends)
    m.observe_epoch("other", ends)
    assert m.records_in == {("out", "events"): 10, ("other", "events"): 10}


def test_a_report_with_another_start_is_not_claimed_by_a_range_ending_at_the_same_offset() -> None:
    m = metrics()
    m.add_reports([report(0, 5, 10)])
    m.observe_epoch("out", record(0, {"orders": {"0": 0}}, {"orders": {"0": 10}}))
    assert m.records_in[("out", "events")] == 0
    # With unknown start offsets (no offset log before the epoch), the end offset alone decides.
    m.observe_epoch("out", record(1, {}, {"orders": {"0": 10}}))
    assert m.records_in[("out", "events")] == 5


def test_unclaimed_reports_expire() -> None:
    clock = Clock()
    m = metrics(clock)
    m.add_reports([report(0, 0, 10)])
    clock.now += PENDING_TTL_S + 1
    m.observe_epoch("out", record(0, {"orders": {"0": 50}}, {"orders": {"0": 60}}))
    assert m.unclaimed_reports == 1
    m.observe_epoch("out", record(1, {"orders": {"0": 0}}, {"orders": {"0": 10}}))
    assert m.records_in[("out", "events")] == 0


def _exact_buckets(latencies_s: list[float]) -> list[int]:
    h = Histogram(LATENCY_BUCKETS)
    for value in latencies_s:
        h.observe(value)
    return h.buckets


def test_end_to_end_latency_matches_the_per_record_computation() -> None:
    rng = random.Random(7)
    read_ms = 1_800_000_000_000
    # Ages from a few ms to an hour, a few timestamps after the read (a producer clock ahead), some without one.
    stamps = [read_ms - int(10 ** rng.uniform(0, 6.6)) for _ in range(5000)] + [read_ms + 3, read_ms + 40]
    batch = pa.RecordBatch.from_pydict(
        {"timestamp": pa.array([s * 1000 for s in stamps] + [None, None], pa.timestamp("us", tz="UTC"))}
    )
    tally = ReadTally("events", "orders", 0, 0, len(stamps) + 2)
    tally.read_ms = read_ms
    tally.observe(batch)
    m = metrics()
    m.add_reports([tally.report()])
    started, took = read_ms + 700, 1234
    m.observe_epoch(
        "out", record(0, {"orders": {"0": 0}}, {"orders": {"0": len(stamps) + 2}}, 0, started, took)
    )
    commit = started + took
    exact = [(commit - s) / 1000 for s in stamps]
    hist = m.latency_seconds[("out", "events")]
    assert hist.count == len(stamps)  # records without a timestamp have no latency
    assert hist.sum == pytest.approx(sum(exact), abs=1e-6)  # exact: count * commit - sum of timestamps
    # Bucket placement is exact except for latencies within the sketch's 1% of a bucket bound.
    near = sum(1 for v in exact if any(abs(v - b) <= 0.0101 * v for b in LATENCY_BUCKETS))
    misplaced = sum(abs(a - b) for a, b in zip(hist.buckets, _exact_buckets(exact), strict=True)) // 2
    assert misplaced <= near
    assert misplaced < len(stamps) * 0.01


def test_records_out_per_sink_side_outputs_commit_latency_and_retries() -> None:
    m = JobMetrics(APP, {"events": source()})
    m.add_query("windows", ["counts", "late"], side_outputs=["late"])
    rows = [
        {"task": 0, "records": 7, "skipped": 0, "attempts": 1, "sink_records": [5, 2], "commit_ms": 12.0},
        {"task": 1, "records": 4, "skipped": 0, "attempts": 3, "sink_records": [4, 0], "commit_ms": 30.0},
        {"task": 2, "records": 0, "skipped": 1, "attempts": 0, "sink_records": [0, 0], "commit_ms": None},
    ]
    m.observe_epoch("windows", record(0, {}, {}, 11), rows)
    assert m.records_out == {("windows", "counts"): 9, ("windows", "late"): 2}
    assert m.late[("windows", "side-output", "late")] == 2
    commits = m.commit_seconds[("windows",)]
    assert (commits.count, commits.sum) == (2, pytest.approx(0.042))
    assert m.retries[("windows",)] == 2
    assert m.tasks == {("windows", "committed"): 2, ("windows", "skipped"): 1}


def test_records_out_without_task_rows_go_to_the_only_sink() -> None:
    m = metrics()
    m.observe_epoch("out", record(0, {}, {}, records_out=42))
    assert m.records_out == {("out", "out"): 42}
    m.add_query("multi", ["a", "b"])
    m.observe_epoch("multi", record(0, {}, {}, records_out=5))
    assert m.records_out[("multi", "*")] == 5


def test_a_failed_epoch_counts_its_outcome_only() -> None:
    m = metrics()
    m.add_reports([report(0, 0, 10)])
    m.observe_epoch("out", record(0, {"orders": {"0": 0}}, {"orders": {"0": 10}}, outcome="failed"))
    assert {k: n for k, n in m.epochs.items() if n} == {("out", "failed"): 1}
    assert not any(m.records_in.values()) and not any(h.count for h in m.epoch_seconds.values())
    assert m.snapshot().failed_epochs == 1


def progress(name: str, end: Any, latest: Any, dropped: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "batchId": 3,
        "sources": [{"description": "x", "startOffset": None, "endOffset": end, "latestOffset": latest}],
        "stateOperators": [{"operatorName": "stateStoreSave", "numRowsDroppedByWatermark": dropped}],
    }


def test_progress_reports_give_lag_per_partition_and_watermark_drops() -> None:
    m = metrics()
    m.observe_progress(
        progress(f"{APP}-out", {"orders": {"0": 10, "1": 7}}, '{"orders": {"0": 25, "1": 7}}', 4)
    )
    m.observe_progress(
        progress(f"{APP}-out", {"orders": {"0": 20, "1": 7}}, {"orders": {"0": 25, "1": 7}}, 3)
        | {"batchId": 4}
    )
    m.observe_progress(progress("another-app-out", {"orders": {"0": 0}}, {"orders": {"0": 99}}, 50))
    assert m.lag == {("out", "events", "orders", "0"): 5, ("out", "events", "orders", "1"): 0}
    assert m.late == {("out", "watermark", "stateStoreSave"): 7}
    assert m.snapshot().lag == 5
    m.observe_progress(progress(f"{APP}-out", None, None))  # an idle report without offsets changes nothing
    assert m.snapshot().lag == 5


def test_exposition_names_labels_and_values() -> None:
    m = metrics()
    m.add_reports(
        [
            report(
                0,
                0,
                10,
                dead_lettered=1,
                timestamped=10,
                timestamp_sum_ms=10 * 999_000,
                read_ms=999_000,
                ages={0: 10},
            )
        ]
    )
    m.observe_epoch("out", record(0, {"orders": {"0": 0}}, {"orders": {"0": 10}}, 9, 999_500, 500))
    m.observe_progress(progress(f"{APP}-out", {"orders": {"0": 10}}, {"orders": {"0": 12}}))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(m)
    text = generate_latest(registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    base = (("app_id", APP), ("query", "out"))
    assert samples[("ethereal_kafka_records_in_total", (*base, ("source", "events")))] == 10
    assert samples[("ethereal_kafka_dead_lettered_records_total", (*base, ("source", "events")))] == 1
    assert samples[("ethereal_kafka_records_out_total", (*base, ("sink", "out")))] == 9
    lag = (*base[:1], ("partition", "0"), base[1], ("source", "events"), ("topic", "orders"))
    assert samples[("ethereal_kafka_consumer_lag_records", lag)] == 2
    assert samples[("ethereal_kafka_last_epoch", base)] == 0
    assert samples[("ethereal_kafka_epoch_duration_seconds_count", base)] == 1
    latency = (*base, ("source", "events"))
    assert samples[("ethereal_kafka_end_to_end_latency_seconds_count", latency)] == 10
    assert samples[("ethereal_kafka_end_to_end_latency_seconds_sum", latency)] == pytest.approx(10.0)
    assert (
        samples[
            ("ethereal_kafka_end_to_end_latency_seconds_bucket", (*latency[:1], ("le", "1.0"), *latency[1:]))
        ]
        == 10
    )


def test_endpoint_on_a_free_port_and_a_busy_one() -> None:
    m = metrics()
    server = serve(m, "127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert "ethereal_kafka_records_in_total" in text or "# HELP ethereal_kafka_records_in " in text
        with pytest.raises(ConfigError, match=rf"metrics\.port={server.server_port}"):
            serve(m, "127.0.0.1", server.server_port)
    finally:
        server.shutdown()
        server.server_close()


def test_job_settings() -> None:
    base = {
        "app.id": "a",
        "sources": "s.properties",
        "sinks": "k.properties",
        "pipeline": "m:f",
        "checkpoint.location": "/tmp/x",
    }
    job = JobConfig.from_properties(base)
    assert (job.metrics_enabled, job.metrics_host, job.metrics_port, job.progress) == (
        True,
        "127.0.0.1",
        0,
        "auto",
    )
    job = JobConfig.from_properties(
        {**base, "metrics.enabled": "false", "metrics.port": "9464", "progress": "off"}
    )
    assert (job.metrics_enabled, job.metrics_port, job.progress) == (False, 9464, "off")
    with pytest.raises(ConfigError, match=r"metrics\.port"):
        JobConfig.from_properties({**base, "metrics.port": "70000"})
    with pytest.raises(ConfigError, match="progress"):
        JobConfig.from_properties({**base, "progress": "loud"})


def test_age_sketch_keeps_the_timestamp_sum_exact_with_numpy_ints() -> None:
    tally = ReadTally("events", "orders", 0, 0, 3)
    stamps = np.array([1_799_999_999_123, 1_799_999_999_999, 1_800_000_000_001], dtype=np.int64)
    tally.observe(
        pa.RecordBatch.from_pydict({"timestamp": pa.array(stamps * 1000, pa.timestamp("us", tz="UTC"))})
    )
    assert tally.timestamp_sum_ms == int(stamps.sum()) and tally.timestamped == 3 and tally.records == 3
