"""Whole-run latency of a stopped app whose last run read one record (issue 24, item 9).

The record waited 65 s from its Kafka timestamp to its epoch's commit (a record produced while the job was still
starting). Its latency lands in the (60 s, 120 s] bucket, where interpolating as Prometheus' `histogram_quantile`
does put p50 at 90 s and p99 at 119.4 s: figures no record had. The percentiles of what was observed must lie within
the observed latencies (exact here: one record, 65 s).
"""

from __future__ import annotations

import pytest

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.connectors.kafka.read_stats import ReadTally
from ethereal_kafka.runtime.metrics import JobMetrics
from ethereal_kafka.ui.views import epoch_json, latency_from_epochs

PRODUCED_MS = 1_700_000_000_000
READ_MS = PRODUCED_MS + 60_500
COMMIT_MS = PRODUCED_MS + 65_000


def _one_record_epoch() -> EpochRecord:
    import pyarrow as pa

    from ethereal_kafka.connectors.kafka.range_reader import KAFKA_ARROW_SCHEMA

    tally = ReadTally("events", "orders", 0, 0, 1)
    tally.read_ms = READ_MS
    columns = {name: [None] for name in KAFKA_ARROW_SCHEMA.names}
    columns["timestamp"] = [PRODUCED_MS * 1000]
    tally.observe(pa.RecordBatch.from_pydict(columns, schema=KAFKA_ARROW_SCHEMA))
    metrics = JobMetrics("app", {})
    metrics.add_query("q", ["out"], (), ["events"])
    metrics.add_reports([tally.report()])
    record = EpochRecord(
        app_id="app",
        checkpoint_id="c" * 36,
        epoch=0,
        mode="partition-preserving",
        start_offsets={"orders": {"0": 0}},
        end_offsets={"orders": {"0": 1}},
        records_in=1,
        records_out=1,
        tasks=1,
        skipped_tasks=0,
        started_ms=COMMIT_MS - 1_000,
        duration_ms=1_000,
        outcome="committed",
        query="q",
    )
    extra = metrics.observe_epoch("q", record)
    assert extra is not None
    return EpochRecord(**{**record.__dict__, **extra})


def test_one_record_stopped_app_shows_its_own_latency_not_the_bucket_interpolation() -> None:
    record = _one_record_epoch()
    whole = latency_from_epochs([record])["q"]
    assert whole["count"] == 1
    for name in ("p50", "p95", "p99"):
        assert whole[name] == pytest.approx(65.0, abs=0.01), (name, whole)
    one = epoch_json(0, record)
    assert one["p50"] == pytest.approx(65.0, abs=0.01) and one["p99"] == pytest.approx(65.0, abs=0.01)


def test_live_figures_of_one_record_are_its_latency_too() -> None:
    from ethereal_kafka.ui.views import latency_from_figures

    record = _one_record_epoch()
    assert record.latency is not None
    live = latency_from_figures({"queries": {"q": {"latency": record.latency}}})["q"]
    assert live["p99"] == pytest.approx(65.0, abs=0.01)
