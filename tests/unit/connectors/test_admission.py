"""Adaptive admission: the budget controller (pure), the posted budget file, and the reader obeying it."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.admission import (
    GROWTH_LIMIT,
    AdmissionSettings,
    budget_path,
    next_budget,
    post_budget,
    read_budget,
)
from ethereal_kafka.connectors.kafka.decoding import SourceLayout
from ethereal_kafka.connectors.kafka.source import MAX_ROWS, KafkaStreamReader

SETTINGS = AdmissionSettings(target_ms=1000, min_records=100, max_records=100_000)


def simulate(fixed_ms: float, per_record_ms: float, epochs: int, settings: AdmissionSettings) -> list[int]:
    """Budgets over `epochs` epochs of a job whose epoch costs `fixed + per_record x records`, backlog unlimited."""
    budget, seen = settings.min_records, []
    for i in range(epochs):
        seen.append(budget)
        duration = round(fixed_ms + per_record_ms * budget)
        budget = next_budget(budget, budget, duration, settings, may_shrink=i > 0).budget
    return seen


def test_grows_from_the_minimum_to_the_size_that_fills_the_target_without_overshooting() -> None:
    # 200 ms fixed cost + 0.02 ms per record: 40,000 records fill the 1 s target.
    budgets = simulate(200, 0.02, 12, SETTINGS)
    assert budgets[0] == 100
    assert all(b <= a * GROWTH_LIMIT for a, b in itertools.pairwise(budgets))
    assert all(200 + 0.02 * b <= 1000 * 1.1 for b in budgets), "no epoch ran past the target"
    assert 36_000 <= budgets[-1] <= 40_000
    assert budgets == sorted(budgets)


def test_shrinks_when_epochs_run_long_and_converges_from_above() -> None:
    # The job slows down 4x (another job on the machine): 10,000 records now fill the target.
    budgets = [40_000]
    for _ in range(6):
        duration = round(200 + 0.08 * budgets[-1])
        budgets.append(next_budget(budgets[-1], budgets[-1], duration, SETTINGS).budget)
    assert budgets[1] < budgets[0]
    assert all(b >= 10_000 for b in budgets), "shrinking towards the estimate never undershoots"
    assert budgets[-1] <= 11_000


def test_holds_without_a_backlog_within_tolerance_and_at_the_bounds() -> None:
    step = next_budget(5000, 1200, 300, SETTINGS)
    assert (step.budget, step.action) == (5000, "hold") and "backlog below the budget" in step.reason
    assert next_budget(5000, 5000, 1050, SETTINGS).action == "hold"
    top = AdmissionSettings(1000, 100, 8000)
    assert next_budget(8000, 8000, 100, top).budget == 8000
    assert next_budget(100, 100, 5000, SETTINGS).budget == 100
    assert next_budget(5000, 0, 0, SETTINGS).reason == "empty epoch"


def test_a_runs_first_epoch_may_grow_but_not_shrink() -> None:
    assert next_budget(1000, 1000, 4000, SETTINGS, may_shrink=False).budget == 1000
    assert next_budget(1000, 1000, 4000, SETTINGS).budget == 250
    assert next_budget(1000, 1000, 100, SETTINGS, may_shrink=False).budget == 4000


def test_an_epoch_sized_by_the_estimate_stays_within_the_transaction_budget() -> None:
    # Whatever was measured, the next epoch at the rate seen takes at most the target (<= half the txn timeout).
    for records, duration in [(100, 10), (5000, 990), (5000, 1500), (70_000, 400)]:
        budget = next_budget(records, records, duration, SETTINGS).budget
        assert budget * duration / records <= SETTINGS.target_ms * 1.0001 or budget == SETTINGS.min_records


def _source(tmp_path: Path, **extra: object) -> KafkaSourceConfig:
    config = KafkaSourceConfig.from_properties(
        {"bootstrap.servers": "localhost:1", "topics": "t", "name": "events", "group.id": "app.q"}
    )
    return dataclasses.replace(config, checkpoint_location=str(tmp_path), **extra)  # type: ignore[arg-type]


def test_budget_file_round_trip_and_unusable_files(tmp_path: Path) -> None:
    assert budget_path(_source(tmp_path)) is None, "fixed sizing posts nothing"
    path = budget_path(_source(tmp_path, epoch_sizing="adaptive"))
    assert path == tmp_path / "ethereal-kafka" / "epoch-budget-events@app.q.json"
    assert read_budget(path) is None
    post_budget(path, 1234, 7, "grow")
    assert read_budget(path) == 1234
    path.write_text("{torn")
    assert read_budget(path) is None
    path.write_text('{"budget": 0}')
    assert read_budget(path) is None


class _Resolver:
    def __init__(self, latest: dict[tuple[str, int], int]) -> None:
        self._latest = latest

    def topic_partitions(self) -> list[tuple[str, int]]:
        return sorted(self._latest)

    def latest(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self._latest[tp] for tp in tps}


@pytest.mark.parametrize("sizing", ["fixed", "adaptive"])
def test_the_reader_admits_the_posted_budget_within_sparks_limit(tmp_path: Path, sizing: str) -> None:
    config = _source(tmp_path, epoch_sizing=sizing, max_records_per_epoch=5000)
    reader = KafkaStreamReader(SourceLayout.from_config(config))
    reader._resolver = _Resolver({("t", 0): 10_000, ("t", 1): 10_000})  # type: ignore[assignment]
    start = {"t": {"0": 0, "1": 0}}
    assert reader.getDefaultReadLimit() == ReadMaxRows(5000)

    def taken(limit: ReadMaxRows | ReadAllAvailable) -> int:
        end = reader.latestOffset(start, limit)
        return sum(end["t"].values())

    assert taken(ReadMaxRows(5000)) == 5000, "nothing posted yet: Spark's limit"
    path = budget_path(config)
    if path is not None:
        post_budget(path, 800, 3, "shrink")
        assert taken(ReadMaxRows(5000)) == 800
        post_budget(path, 9000, 4, "grow")
    assert taken(ReadMaxRows(5000)) == 5000, "never past Spark's limit"
    assert taken(ReadAllAvailable()) == 20_000, "ReadAllAvailable is obeyed"


def test_adaptive_sizing_without_a_maximum_still_gives_spark_a_row_limit(tmp_path: Path) -> None:
    config = _source(tmp_path, epoch_sizing="adaptive")
    assert KafkaStreamReader(SourceLayout.from_config(config)).getDefaultReadLimit() == ReadMaxRows(MAX_ROWS)
