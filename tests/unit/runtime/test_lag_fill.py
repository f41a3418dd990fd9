"""`lag ?` after epochs committed (issue 24, item 8): Spark's report of a batch recovered from its offset log has no
`latestOffset`, and an idle query sends no report; the lag of such an epoch is filled in from Kafka. Fake clock, fake
end offsets: no broker, no Spark."""

from __future__ import annotations

import dataclasses
from typing import Any

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.runtime.lag_fill import WAIT_S, EndOffsets, LagFill
from ethereal_kafka.runtime.metrics import JobMetrics
from ethereal_kafka.runtime.run_metrics import RunMetrics

SOURCE = KafkaSourceConfig.from_properties(
    {"name": "orders", "bootstrap.servers": "127.0.0.1:9", "topics": "orders"}
)
ENDS = {"orders": {"0": 100, "1": 50}}


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


class Kafka:
    """End offsets as a cluster would answer, and the requests asked."""

    def __init__(self, ends: dict[tuple[str, int], int] | None = None) -> None:
        self.ends = ends if ends is not None else {("orders", 0): 130, ("orders", 1): 50}
        self.asked: list[list[tuple[str, int]]] = []

    def __call__(
        self, source: KafkaSourceConfig, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        self.asked.append(sorted(partitions))
        return {tp: self.ends[tp] for tp in partitions}


def committed(epoch: int) -> EpochRecord:
    return EpochRecord(
        app_id="shop",
        checkpoint_id="c",
        epoch=epoch,
        mode="partition-preserving",
        start_offsets={"orders": {"0": 90, "1": 40}},
        end_offsets=ENDS,
        records_in=20,
        records_out=20,
        tasks=2,
        skipped_tasks=0,
        started_ms=1_700_000_000_000,
        duration_ms=300,
        outcome="committed",
        query="enrich",
    )


def report(batch: int, latest: dict[str, dict[str, int]] | None) -> dict[str, Any]:
    """A Spark progress report of query `enrich`; `latest` None as Spark sends it for a recovered batch."""
    return {"name": "shop-enrich", "batchId": batch, "sources": [{"endOffset": ENDS, "latestOffset": latest}]}


def setup(kafka: EndOffsets) -> tuple[JobMetrics, LagFill, Clock]:
    clock = Clock()
    metrics = JobMetrics("shop", {"orders": SOURCE}, clock=clock)
    metrics.add_query("enrich", ["out"], sources=["orders"])
    fill = LagFill(metrics, end_offsets=kafka, clock=clock)
    fill.watch("enrich", [SOURCE])
    return metrics, fill, clock


def test_a_recovered_epoch_gets_its_lag_from_kafka() -> None:
    kafka = Kafka()
    metrics, fill, clock = setup(kafka)
    metrics.observe_progress(report(7, None))  # the epoch a restart ran again
    metrics.observe_epoch("enrich", committed(7))
    fill.on_epoch("enrich", committed(7), [])
    assert metrics.snapshot().lag is None  # what the progress line showed: `lag ? | epoch 7 in 300 ms`
    fill.fill_due()
    assert kafka.asked == []  # Spark's report is given WAIT_S to come first
    clock.now += WAIT_S
    fill.fill_due()
    assert kafka.asked == [[("orders", 0), ("orders", 1)]]
    assert metrics.snapshot().lag == 30
    assert metrics.figures()["queries"]["enrich"]["lag"] == {"orders": {"orders": {"0": 30, "1": 0}}}


def test_no_request_when_spark_reported_the_lag() -> None:
    kafka = Kafka()
    metrics, fill, clock = setup(kafka)
    metrics.observe_progress(report(7, {"orders": {"0": 104, "1": 50}}))
    fill.on_epoch("enrich", committed(7), [])
    clock.now += WAIT_S
    fill.fill_due()
    assert kafka.asked == []
    assert metrics.snapshot().lag == 4


def test_a_later_report_replaces_the_filled_figure_and_a_silent_cluster_leaves_it_unknown() -> None:
    metrics, fill, clock = setup(Kafka())
    fill.on_epoch("enrich", committed(7), [])
    clock.now += WAIT_S
    fill.fill_due()
    metrics.observe_progress(report(8, {"orders": {"0": 101, "1": 50}}))
    assert metrics.snapshot().lag == 1

    def down(source: KafkaSourceConfig, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        raise RuntimeError("Kafka did not answer")

    quiet, silent, later = setup(down)
    silent.on_epoch("enrich", committed(7), [])
    later.now += WAIT_S
    silent.fill_due()  # never raises
    assert quiet.snapshot().lag is None


def test_only_committed_epochs_are_noted() -> None:
    kafka = Kafka()
    _metrics, fill, clock = setup(kafka)
    fill.on_epoch("enrich", dataclasses.replace(committed(7), outcome="failed"), [])
    clock.now += WAIT_S
    fill.fill_due()
    assert kafka.asked == []


class Coordinator:
    """What `RunMetrics.watch` reads of the coordinator."""

    def __init__(self) -> None:
        self.queries: dict[str, Any] = {"enrich": type("Q", (), {"sinks": ()})()}
        self.epoch_annotators: list[Any] = []
        self.epoch_listeners: list[Any] = []

    def query_sources(self, name: str) -> list[KafkaSourceConfig]:
        return [SOURCE]


def test_a_run_hands_its_committed_epochs_to_the_filler() -> None:
    kafka = Kafka()
    clock = Clock()
    metrics = JobMetrics("shop", {"orders": SOURCE}, clock=clock)
    fill = LagFill(metrics, end_offsets=kafka, clock=clock)
    run = RunMetrics(metrics, lag_fill=fill)
    coordinator = Coordinator()
    run.watch(coordinator)  # type: ignore[arg-type]
    try:
        for listener in coordinator.epoch_listeners:
            listener("enrich", committed(3), [])
        clock.now += WAIT_S
        fill.fill_due()
        assert metrics.snapshot().lag == 30
    finally:
        run.close()
