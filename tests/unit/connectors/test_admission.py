"""Adaptive admission: the budget controller (pure), the posted budget file, and the reader obeying it."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import statistics
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.admission import (
    FIXED_COST_HEADROOM,
    HISTORY,
    RAMP_GROWTH_LIMIT,
    STATEFUL_FIXED_COST_HEADROOM,
    STEP_CEILING,
    AdmissionSettings,
    CostModel,
    aimed_ms,
    budget_path,
    cost_model,
    next_budget,
    post_budget,
    read_budget,
    read_history,
)
from ethereal_kafka.connectors.kafka.decoding import SourceLayout
from ethereal_kafka.connectors.kafka.source import _UNLIMITED_ROWS, KafkaStreamReader

SETTINGS = AdmissionSettings(target_ms=1000, min_records=100, max_records=100_000)


def simulate(
    fixed_ms: float,
    per_record_ms: float,
    epochs: int,
    settings: AdmissionSettings,
    noise: float = 0.0,
    seed: int = 3,
    warm_up_records: int = 0,
) -> tuple[list[int], list[int]]:
    """Budgets and durations over `epochs` epochs of a job whose epoch costs `fixed + per_record x records` (times a
    random factor within +-`noise`), with an unlimited backlog; the sizer's loop as `runtime.admission` runs it.
    With `warm_up_records`, the per-record cost starts 3x higher and decays (e^-done/warm_up) as records pass."""
    rng = random.Random(seed)
    budget, budgets, durations, history = settings.min_records, [], [], []
    model: CostModel | None = None
    done = 0
    for i in range(epochs):
        per_record = per_record_ms * (1 + 2 * math.exp(-done / warm_up_records) if warm_up_records else 1)
        done += budget
        duration = round((fixed_ms + per_record * budget) * (1 + rng.uniform(-noise, noise)))
        budgets.append(budget)
        durations.append(duration)
        if i > 0:
            history = [*history, (budget, duration)][-HISTORY:]
            model = cost_model(history, settings.min_records) or model
        budget = next_budget(
            budget, budget, duration, settings, may_shrink=i > 0, model=model, recent=history
        ).budget
    return budgets, durations


def test_grows_from_the_minimum_to_the_size_that_fills_the_target_without_overshooting() -> None:
    # 200 ms fixed cost + 0.02 ms per record: 40,000 records fill the 1 s target.
    budgets, durations = simulate(200, 0.02, 12, SETTINGS)
    assert budgets[0] == 100
    assert all(b <= a * RAMP_GROWTH_LIMIT for a, b in itertools.pairwise(budgets))
    assert all(200 + 0.02 * b <= 1000 * 1.1 for b in budgets), "no epoch ran past the target"
    assert 900 <= durations[-1] <= 1000 and budgets[-1] <= 40_000, "within the tolerance below the target"
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
    assert next_budget(1000, 1000, 100, SETTINGS, may_shrink=False).budget == 8000
    assert next_budget(1000, 1000, 2500, SETTINGS, may_shrink=False).budget == 1000


def test_the_ramp_from_a_small_budget_takes_a_few_epochs_and_stays_under_the_ceiling() -> None:
    # As measured on the bench (bench/adaptive.py): ~450 ms fixed cost per epoch, ~0.01 ms per record, 2 s target.
    settings = AdmissionSettings(target_ms=2000, min_records=1000, max_records=1_000_000)
    budgets, durations = simulate(450, 0.01, 12, settings)
    fits = (2000 - 450) / 0.01
    first_near = next(i for i, b in enumerate(budgets) if b >= 0.75 * fits)
    assert first_near <= 5, f"the ramp took {first_near} epochs: {budgets}"
    assert max(durations) <= 2000 * 1.1, durations
    # Worst case for a ramp step: no fixed cost at all (durations grow in proportion to the records).
    budgets, durations = simulate(0, 0.02, 12, settings)
    assert max(durations) <= STEP_CEILING * 2000, (budgets, durations)
    # With noise, every epoch after the first stays under twice the target.
    for seed in range(20):
        _, durations = simulate(450, 0.01, 15, settings, noise=0.3, seed=seed)
        assert max(durations[1:]) < 2 * 2000, (seed, durations)


def test_after_the_ramp_epochs_settle_at_the_aim_while_the_job_warms_up() -> None:
    # As on the bench: ~400 ms fixed cost, a per-record cost that falls 3x over the first few hundred thousand
    # records (workers warming up), noisy durations. Growth from the cost model's fill (capped so that even a
    # step of pure per-record cost stays under 1.5x the aim) reaches the aim; the rate estimate alone, damped by
    # the median of three epochs, settled ~25 % below it.
    settings = AdmissionSettings(target_ms=2000, min_records=1000, max_records=1_000_000)
    for seed in range(20):
        _, durations = simulate(400, 0.0035, 12, settings, noise=0.2, seed=seed, warm_up_records=200_000)
        assert statistics.median(durations[6:]) >= 0.8 * 2000, (seed, durations)
        assert max(durations[1:]) < 2 * 2000, (seed, durations)


def test_a_short_epoch_among_steady_epochs_of_its_size_is_noise_not_a_ramp() -> None:
    steady = [(40_000, 1000), (40_000, 1020), (40_000, 980)]
    fast = next_budget(40_000, 40_000, 300, SETTINGS, recent=[*steady, (40_000, 300)])
    assert (fast.action, fast.budget) == ("hold", 40_000), fast
    ramp = next_budget(40_000, 40_000, 300, SETTINGS, recent=[(2_500, 250), (10_000, 260), (40_000, 300)])
    assert (ramp.action, ramp.budget) == ("grow", 200_000 if SETTINGS.max_records > 200_000 else 100_000), (
        ramp
    )


def test_an_epoch_sized_by_the_estimate_stays_within_the_transaction_budget() -> None:
    # Whatever was measured, the next epoch at the rate seen takes at most the target (<= half the txn timeout).
    for records, duration in [(100, 10), (5000, 990), (5000, 1500), (70_000, 400)]:
        budget = next_budget(records, records, duration, SETTINGS).budget
        assert budget * duration / records <= SETTINGS.target_ms * 1.0001 or budget == SETTINGS.min_records


def test_the_fixed_cost_is_estimated_robustly_from_varied_sizes() -> None:
    assert cost_model([(1000, 500), (1000, 520)]) is None, "equal sizes cannot tell"
    assert cost_model([(40, 1500), (40, 1400)], min_records=40) == CostModel(1400), (
        "minimum size: all fixed cost"
    )
    exact = cost_model([(n, round(300 + 0.01 * n)) for n in (1000, 4000, 16000, 40000)])
    assert exact is not None and exact.fixed_ms == pytest.approx(300, abs=2)
    assert exact.per_record_ms == pytest.approx(0.01, rel=0.01)
    noisy = cost_model([(1000, 310), (4000, 290), (16000, 600), (40000, 700), (40000, 2500)])  # one GC pause
    assert noisy is not None and 250 <= noisy.fixed_ms <= 320


def test_a_target_below_the_fixed_cost_aims_above_it_instead_of_shrinking_into_overhead() -> None:
    # A heavy job on a busy machine: 1.4 s per epoch whatever its size, 0.1 ms per record, target 200 ms.
    settings = AdmissionSettings(target_ms=200, min_records=40, max_records=100_000)
    budgets, durations = simulate(1400, 0.1, 30, settings, noise=0.2)
    assert min(budgets[5:]) >= 40 * 2 and budgets[-1] >= 40 * 10, f"collapsed to the minimum: {budgets}"
    assert max(durations[10:]) <= 2 * FIXED_COST_HEADROOM * 1400 * 1.2, durations
    assert aimed_ms(settings, CostModel(1400)) == 2100
    assert aimed_ms(settings, None) == 200 == aimed_ms(settings, CostModel(50))


def test_one_noisy_epoch_neither_grows_nor_shrinks_the_budget() -> None:
    steady = [(40_000, 1000), (40_000, 1020), (40_000, 980)]
    fast = next_budget(40_000, 40_000, 500, SETTINGS, recent=[*steady, (40_000, 500)])
    assert (fast.action, fast.budget) == ("hold", 40_000), "one fast epoch among steady ones"
    slow = next_budget(40_000, 40_000, 1400, SETTINGS, recent=[*steady, (40_000, 1400)])
    assert (slow.action, slow.budget) == ("hold", 40_000), "one slow epoch among steady ones"
    runaway = next_budget(40_000, 40_000, 4000, SETTINGS, recent=[*steady, (40_000, 4000)])
    assert (runaway.action, runaway.budget) == ("shrink", 10_000), "past 1.5x the aim: shrink at once"
    agreed = next_budget(40_000, 40_000, 500, SETTINGS, recent=[(40_000, 520), (40_000, 480), (40_000, 500)])
    assert (agreed.action, agreed.budget) == ("grow", 80_000)


def test_noisy_durations_keep_epochs_within_twice_the_target() -> None:
    budgets, durations = simulate(250, 0.02, 60, SETTINGS, noise=0.3)
    steady = sorted(durations[10:])
    assert steady[int(len(steady) * 0.99)] < 2 * SETTINGS.target_ms
    assert sum(budgets[10:]) / 50 > 25_000, "most of the target is used for records"


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
    post_budget(path, 1234, 7, "grow", [(100, 20), (400, 50)])
    assert read_budget(path) == 1234 and read_history(path) == [(100, 20), (400, 50)]
    path.write_text("{torn")
    assert read_budget(path) is None and read_history(path) == []
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
    assert KafkaStreamReader(SourceLayout.from_config(config)).getDefaultReadLimit() == ReadMaxRows(
        _UNLIMITED_ROWS
    )


def test_the_aim_over_the_fixed_cost_follows_the_settings_headroom() -> None:
    stateful = dataclasses.replace(SETTINGS, fixed_cost_headroom=STATEFUL_FIXED_COST_HEADROOM)
    assert aimed_ms(SETTINGS, CostModel(600.0)) == max(1000, math.ceil(FIXED_COST_HEADROOM * 600))
    assert aimed_ms(stateful, CostModel(600.0)) == 2400
    assert aimed_ms(stateful, CostModel(200.0)) == 1000, "a cheap epoch keeps the target"


def test_the_aim_never_passes_the_settings_longest_duration() -> None:
    """Under exactly-once the sizer aims at most at half the transaction timeout (`longest_ms`), whatever the fixed
    cost: a stateful query whose epochs cost 20 s each (a loaded machine) used to aim at 4 x 20 s = 80 s, beyond
    a 60 s timeout, now that the epoch's records bound no longer holds it back."""
    stateful = AdmissionSettings(1000, 100, 10**8, STATEFUL_FIXED_COST_HEADROOM, longest_ms=30_000)
    assert aimed_ms(stateful, CostModel(20_000.0)) == 30_000
    assert aimed_ms(stateful, CostModel(5_000.0)) == 20_000, "below the limit the headroom rules"
    assert aimed_ms(dataclasses.replace(stateful, longest_ms=0), CostModel(20_000.0)) == 80_000
    _, durations = simulate(20_000, 0.01, 25, stateful)
    assert max(durations[1:]) <= STEP_CEILING * 30_000, durations
    assert durations[-1] == pytest.approx(30_000, rel=0.15), durations
