"""Figures that add up (no Spark, no broker): records in counted once however many queries read them, the records
an epoch read, the run summary, metric families exported before the first epoch, the latency buckets, and the
watermark and state-store gauges taken from Spark's progress reports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.read_stats import ReadReport, age_bucket
from ethereal_kafka.runtime.metrics import EPOCH_BUCKETS, LATENCY_BUCKETS, JobMetrics
from ethereal_kafka.runtime.progress import render
from ethereal_kafka.runtime.runner import observe_last_progress
from ethereal_kafka.runtime.spark import (
    DEFAULT_CONF,
    STATE_STORE_KEY,
    STATE_STORE_PROVIDERS,
    TRACK_ROWS_KEY,
    state_rows_counted,
)
from ethereal_kafka.runtime.summary import RunSummary

APP = "shop"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def two_queries(clock: Clock | None = None) -> JobMetrics:
    """A job whose queries `enrich` and `totals` both read source `events` (topic `orders`)."""
    src = KafkaSourceConfig.from_properties(
        {"name": "events", "bootstrap.servers": "127.0.0.1:9", "topics": "orders"}
    )
    m = JobMetrics(APP, {"events": src}, **({"clock": clock} if clock else {}))
    m.add_query("enrich", ["enriched"], sources=["events"])
    m.add_query("totals", ["counts"], sources=["events"])
    return m


def report(partition: int, start: int, until: int, records: int | None = None) -> ReadReport:
    n = until - start if records is None else records
    return ReadReport("events", "orders", partition, start, until, n, 0, 0, 0, 0, 0, {})


def epoch(query: str, n: int, start: dict[str, int], end: dict[str, int], out: int) -> EpochRecord:
    return EpochRecord(
        app_id=APP,
        checkpoint_id="c1",
        epoch=n,
        mode="partition-preserving",
        start_offsets={"orders": start},
        end_offsets={"orders": end},
        records_in=-1,
        records_out=out,
        tasks=0,
        skipped_tasks=0,
        started_ms=1_000_000,
        duration_ms=400,
        outcome="committed",
        query=query,
    )


def feed_300(m: JobMetrics) -> None:
    """300 records on 2 partitions (150 each), read by both queries: `enrich` in one epoch, `totals` in two."""
    m.add_reports([report(0, 0, 150), report(1, 0, 150)])
    m.observe_epoch("enrich", epoch("enrich", 0, {"0": 0, "1": 0}, {"0": 150, "1": 150}, 300))
    m.add_reports([report(0, 0, 100), report(1, 0, 150), report(0, 100, 150)])
    m.observe_epoch("totals", epoch("totals", 0, {"0": 0, "1": 0}, {"0": 100, "1": 150}, 7))
    m.observe_epoch("totals", epoch("totals", 1, {"0": 100, "1": 150}, {"0": 150, "1": 150}, 2))


def samples(m: JobMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(m)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_records_read_by_two_queries_count_once_in_the_progress_line() -> None:
    m = two_queries()
    feed_300(m)
    now = m.snapshot()
    assert now.records_in == 300  # was 600: each record once per query
    assert now.records_out == 309
    assert render(APP, now, None).startswith("shop | in 300 total | out 309 total |")
    # Per query, each reader still has its own figure (the endpoint's `records_in` keeps the query label).
    assert dict(m.records_in) == {("enrich", "events"): 300, ("totals", "events"): 300}
    exported = samples(m)
    assert (
        exported[("ethereal_kafka_source_records_in_total", (("app_id", APP), ("source", "events")))] == 300
    )


def test_a_query_behind_the_other_does_not_lower_the_count() -> None:
    m = two_queries()
    m.add_reports([report(0, 0, 150), report(1, 0, 10)])
    m.observe_epoch("enrich", epoch("enrich", 0, {"0": 0, "1": 0}, {"0": 150, "1": 10}, 160))
    m.add_reports([report(0, 0, 20), report(1, 0, 90)])
    m.observe_epoch("totals", epoch("totals", 0, {"0": 0, "1": 0}, {"0": 20, "1": 90}, 0))
    assert m.snapshot().records_in == 150 + 90  # per partition, the most any query read


def test_an_epoch_records_what_its_read_tasks_read_not_its_offsets() -> None:
    m = two_queries()
    # 100 offsets on partition 0 hold 97 records and 3 transaction markers.
    m.add_reports([report(0, 0, 100, records=97), report(1, 0, 0, records=0)])
    extra = m.observe_epoch("enrich", epoch("enrich", 0, {"0": 0, "1": 0}, {"0": 100, "1": 0}, 97))
    assert extra is not None and extra["records_read"] == 97
    # A range that advanced without a report (a job run before reports were kept, say): unknown, not a guess.
    extra = m.observe_epoch("totals", epoch("totals", 0, {"0": 0}, {"0": 100}, 97))
    assert extra is not None and extra["records_read"] is None


def test_the_run_summary_adds_up() -> None:
    clock = Clock()
    m = two_queries(clock)
    feed_300(m)
    m.observe_progress(
        {
            "name": f"{APP}-totals",
            "eventTime": {"watermark": "2026-01-01T00:00:10.000Z"},
            "stateOperators": [
                {"operatorName": "stateStoreSave", "numRowsTotal": 12, "numRowsDroppedByWatermark": 4}
            ],
        }
    )
    clock.now += 12.34
    summary = m.summary()
    assert summary.records_in == 300
    assert summary.records_in_per_query == {"enrich": 300, "totals": 300}
    assert summary.records_out == {("enrich", "enriched"): 300, ("totals", "counts"): 9}
    assert summary.epochs == {"committed": 3, "failed": 0, "interrupted": 0}
    assert summary.late == 4 and summary.state_rows == {"totals": 12}
    assert summary.lines() == [
        "summary of shop: 12.3 s",
        "  in             300 records read from Kafka (per query: enrich 300, totals 300)",
        "  out            enrich -> enriched 300; totals -> counts 9",
        "  dead-lettered  0",
        "  late           4",
        "  epochs         3 committed, 0 failed",
        "  state          totals 12 rows",
    ]


def test_a_summary_of_one_query_without_input() -> None:
    lines = RunSummary("shop", 1.0, 0, {"enrich": 0}, {("enrich", "enriched"): 0}).lines()
    assert lines[1] == "  in             0 records read from Kafka"
    assert lines[-1] == "  epochs         0 committed, 0 failed"


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    """A sample's labels as `samples` keys them (sorted, with the app id)."""
    return tuple(sorted({"app_id": APP, **values}.items()))


def test_the_endpoint_lists_every_family_with_zeros_before_the_first_epoch() -> None:
    exported = samples(two_queries())
    for query in ("enrich", "totals"):
        for name in ("records_in_total", "dead_lettered_records_total", "skipped_records_total"):
            assert exported[(f"ethereal_kafka_{name}", labels(query=query, source="events"))] == 0
        for outcome in ("committed", "failed"):
            assert exported[("ethereal_kafka_epochs_total", labels(query=query, outcome=outcome))] == 0
        assert exported[("ethereal_kafka_epoch_duration_seconds_count", labels(query=query))] == 0
        latency = labels(query=query, source="events")
        assert exported[("ethereal_kafka_end_to_end_latency_seconds_count", latency)] == 0
    assert exported[("ethereal_kafka_records_out_total", labels(query="enrich", sink="enriched"))] == 0
    assert exported[("ethereal_kafka_records_out_total", labels(query="totals", sink="counts"))] == 0
    assert exported[("ethereal_kafka_source_records_in_total", labels(source="events"))] == 0


def test_latency_buckets_have_steps_between_10_and_30_seconds() -> None:
    for bounds in (LATENCY_BUCKETS, EPOCH_BUCKETS):
        assert {15.0, 20.0} <= set(bounds)
        assert list(bounds) == sorted(set(bounds))
    m = two_queries()
    m.add_reports(
        [
            ReadReport(
                "events", "orders", 0, 0, 10, 10, 0, 0, 10, 10 * 983_000, 999_000, {age_bucket(16_000): 10}
            )
        ]
    )
    m.observe_epoch("enrich", epoch("enrich", 0, {"0": 0}, {"0": 10}, 10))
    hist = m.latency_seconds[("enrich", "events")]
    # Records 16 s old when read, committed 1.4 s later: between 15 and 20 s(before: anywhere between 10 and 30 s).
    assert hist.buckets[LATENCY_BUCKETS.index(20.0)] == 10


def progress(query: str, watermark: str | None, operators: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"name": f"{APP}-{query}", "batchId": 4, "stateOperators": operators}
    if watermark is not None:
        body["eventTime"] = {"watermark": watermark, "max": "2026-01-01T00:01:00.000Z"}
    return body


def test_watermark_and_state_store_size_per_query() -> None:
    m = two_queries()
    save = {"operatorName": "stateStoreSave", "numRowsTotal": 40, "memoryUsedBytes": 8192}
    m.observe_progress(progress("totals", "2026-01-01T00:00:30.000Z", [save]))
    m.observe_progress(progress("enrich", None, []))  # stateless: no watermark, no state
    later = {**save, "numRowsTotal": 25, "memoryUsedBytes": 4096}
    m.observe_progress(progress("totals", "2026-01-01T00:00:45.500Z", [later]))
    exported = samples(m)
    assert exported[("ethereal_kafka_watermark_timestamp_seconds", labels(query="totals"))] == 1767225645.5
    op = labels(query="totals", operator="stateStoreSave")
    assert exported[("ethereal_kafka_state_rows", op)] == 25  # a gauge: the latest report, not a sum
    assert exported[("ethereal_kafka_state_memory_bytes", op)] == 4096
    assert (
        "ethereal_kafka_watermark_timestamp_seconds",
        (("app_id", APP), ("query", "enrich")),
    ) not in exported
    assert m.summary().watermarks_s == {"totals": 1767225645.5}


def test_state_rows_spark_does_not_count_are_left_out_not_shown_as_zero() -> None:
    """RocksDB without its row count (the framework's default, `runtime.spark.TRACK_ROWS_KEY`) reports 0 rows for
    every store: no state-rows gauge and no state line in the summary then, the state's bytes still."""
    src = KafkaSourceConfig.from_properties(
        {"name": "events", "bootstrap.servers": "127.0.0.1:9", "topics": "o"}
    )
    m = JobMetrics(APP, {"events": src}, state_rows_counted=False)
    m.add_query("totals", ["counts"], sources=["events"])
    m.observe_progress(
        progress(
            "totals", None, [{"operatorName": "stateStoreSave", "numRowsTotal": 0, "memoryUsedBytes": 512}]
        )
    )
    exported = samples(m)
    op = labels(query="totals", operator="stateStoreSave")
    assert ("ethereal_kafka_state_rows", op) not in exported
    assert exported[("ethereal_kafka_state_memory_bytes", op)] == 512
    assert m.summary().state_rows == {} and not any(" state " in line for line in m.summary().lines())
    rocksdb = {STATE_STORE_KEY: STATE_STORE_PROVIDERS["rocksdb"]}
    assert not state_rows_counted({**DEFAULT_CONF})
    assert state_rows_counted(rocksdb), "Spark's own default counts them"
    assert state_rows_counted({**DEFAULT_CONF, TRACK_ROWS_KEY: "true"})
    assert state_rows_counted({**DEFAULT_CONF, STATE_STORE_KEY: STATE_STORE_PROVIDERS["memory"]})


def test_every_exported_metric_is_documented_and_every_documented_one_exported() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"^\| `(ethereal_kafka_\w+)` \|", doc, flags=re.M))
    exported = {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in two_queries().collect()
    }
    assert documented == exported


def test_a_progress_report_seen_twice_counts_its_drops_once() -> None:
    """The runner hands each query's `lastProgress` over when the run ends, which the listener may have delivered
    already: the gauges take it again, the late-record counter does not."""
    m = two_queries()
    dropped = {"operatorName": "stateStoreSave", "numRowsTotal": 3, "numRowsDroppedByWatermark": 2}
    m.observe_progress(progress("totals", "2026-01-01T00:00:30.000Z", [dropped]))
    m.observe_progress(progress("totals", "2026-01-01T00:00:30.000Z", [{**dropped, "numRowsTotal": 5}]))
    assert m.late == {("totals", "watermark", "stateStoreSave"): 2}
    assert m.state_rows == {("totals", "stateStoreSave"): 5}
    m.observe_progress({**progress("totals", None, [dropped]), "batchId": 5})
    assert m.late == {("totals", "watermark", "stateStoreSave"): 4}


def test_the_last_progress_of_a_query_reaches_the_summary() -> None:
    """`run` reads each query's `lastProgress` before the summary (PySpark 4 gives an object with a `json` text);
    a query whose progress cannot be read leaves the figures as they were."""

    class Progress:
        json = json.dumps(
            progress("totals", "2026-01-01T00:00:30.000Z", [{"operatorName": "agg", "numRowsTotal": 9}])
        )

    class Query:
        name = "totals"
        lastProgress = Progress()

    class Broken:
        name = "enrich"

        @property
        def lastProgress(self) -> Any:
            raise RuntimeError("query gone")

    m = two_queries()
    observe_last_progress(m, Query())  # type: ignore[arg-type]
    observe_last_progress(m, Broken())  # type: ignore[arg-type]
    assert m.summary().state_rows == {"totals": 9}
    assert m.summary().watermarks_s == {"totals": 1767225630.0}
