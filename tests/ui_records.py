"""Checkpoint-history records for the web UI's tests (unit and browser), built as a run builds them.

`one_record_epoch()` is issue 24's case: a stopped app whose last run read one record, which waited 65 s from its
Kafka timestamp to its epoch's commit (a record produced while the job was still starting). Its latency falls in
the (60 s, 120 s] bucket, where interpolating as Prometheus' `histogram_quantile` does gives p50 90 s and p99
119.4 s: figures no record had.
"""

from __future__ import annotations

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.connectors.kafka.read_stats import ReadTally
from ethereal_kafka.runtime.metrics import JobMetrics

PRODUCED_MS = 1_700_000_000_000
READ_MS = PRODUCED_MS + 60_500
COMMIT_MS = PRODUCED_MS + 65_000
#: The one record's end-to-end latency, seconds: what every percentile must show.
LATENCY_S = (COMMIT_MS - PRODUCED_MS) / 1000


def one_record_epoch(app_id: str = "app", query: str = "q") -> EpochRecord:
    """Epoch 0 of `query`: one record of topic `orders` read and committed, its latency observed by the job's
    metrics as a run observes it (`JobMetrics.observe_epoch` over the read task's report)."""
    import pyarrow as pa

    from ethereal_kafka.connectors.kafka.range_reader import KAFKA_ARROW_SCHEMA

    tally = ReadTally("events", "orders", 0, 0, 1)
    tally.read_ms = READ_MS
    columns = {name: [None] for name in KAFKA_ARROW_SCHEMA.names}
    columns["timestamp"] = [PRODUCED_MS * 1000]
    tally.observe(pa.RecordBatch.from_pydict(columns, schema=KAFKA_ARROW_SCHEMA))
    metrics = JobMetrics(app_id, {})
    metrics.add_query(query, ["out"], (), ["events"])
    metrics.add_reports([tally.report()])
    record = EpochRecord(
        app_id=app_id,
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
        query=query,
    )
    extra = metrics.observe_epoch(query, record)
    assert extra is not None
    return EpochRecord(**{**record.__dict__, **extra})
