"""The job's epoch sizer: first budgets, budgets learned from committed epochs, what it ignores, restarts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.config.job import JobConfig
from ethereal_kafka.connectors.kafka.admission import (
    STATEFUL_FIXED_COST_HEADROOM,
    budget_path,
    read_budget,
)
from ethereal_kafka.connectors.kafka.epoch_bounds import ADAPTIVE_MAX_BYTES, default_bounds
from ethereal_kafka.runtime.admission import EpochSizer, admission_settings, admitted, sized_source
from ethereal_kafka.runtime.runner import job_sources
from tests.unit.runtime.test_runner_sources import _job


def _coordinator(sources: dict[str, Any], stateful: bool = False) -> Any:
    return SimpleNamespace(
        queries={"out": SimpleNamespace(stateful=stateful)},
        query_sources=lambda query: list(sources.values()),
        epoch_listeners=[],
    )


def _record(epoch: int, start: int, end: int, duration_ms: int, **kw: Any) -> EpochRecord:
    fields: dict[str, Any] = {
        "app_id": "shop",
        "checkpoint_id": "c",
        "epoch": epoch,
        "mode": "shuffling",
        "start_offsets": {"ta": {"0": start}, "tb": {"0": 0}},
        "end_offsets": {"ta": {"0": end}, "tb": {"0": 0}},
        "records_in": end - start,
        "records_out": end - start,
        "tasks": 2,
        "skipped_tasks": 0,
        "started_ms": 0,
        "duration_ms": duration_ms,
        "outcome": "committed",
        "error": None,
        **kw,
    }
    return EpochRecord(**fields)


def test_sources_of_an_adaptive_job_read_posted_budgets_within_their_maximum(tmp_path: Path) -> None:
    loaded = _job(tmp_path, "epoch.min.records=200\nepoch.max.records=5000\ntrigger.interval.ms=400\n")
    job = loaded.job
    assert job.epoch_sizing == "adaptive" and job.epoch_target == 400
    sources = job_sources(loaded, True)
    assert {s.epoch_sizing for s in sources.values()} == {"adaptive"}
    assert {s.max_records_per_epoch for s in sources.values()} == {5000}
    small = sources["a"].__class__.from_properties(
        {"bootstrap.servers": "x:1", "topics": "t", "max.records.per.epoch": "150"}
    )
    assert admission_settings(job, small) == admission_settings(job, small).__class__(
        400, 150, 150, longest_ms=job.transaction_timeout_ms // 2
    )
    assert admission_settings(job, small, stateful=True).fixed_cost_headroom == STATEFUL_FIXED_COST_HEADROOM
    fixed = JobConfig.from_properties({**job.to_properties(), "epoch.sizing": "fixed"})
    assert sized_source(fixed, small) == {}


def test_exactly_once_sources_get_bounds_for_the_jobs_sizing_mode(tmp_path: Path) -> None:
    """Adaptive (the default): the sizer's maximum is the job's epoch.max.records, bytes `ADAPTIVE_MAX_BYTES`, and
    the sizer aims at most at half the transaction timeout; fixed: the floor-rate bounds of the timeout."""
    loaded = _job(tmp_path)
    job = loaded.job
    adaptive = job_sources(loaded, True)["a"]
    assert (adaptive.max_records_per_epoch, adaptive.max_bytes_per_epoch) == (
        job.epoch_max_records,
        ADAPTIVE_MAX_BYTES,
    )
    assert admission_settings(job, adaptive, stateful=True).longest_ms == job.transaction_timeout_ms // 2
    fixed = job_sources(_job(tmp_path, "epoch.sizing=fixed\n"), True)["a"]
    assert (fixed.max_records_per_epoch, fixed.max_bytes_per_epoch) == default_bounds(
        job.transaction_timeout_ms, job.trigger_interval_ms
    )
    alo = _job(tmp_path, "delivery.guarantee=at-least-once\n")
    assert admission_settings(alo.job, job_sources(alo, True)["a"]).longest_ms == 0


def test_budgets_grow_with_a_backlog_shrink_when_long_and_survive_a_restart(tmp_path: Path) -> None:
    loaded = _job(tmp_path, "epoch.min.records=100\nepoch.max.records=100000\ntrigger.interval.ms=1000\n")
    sources = job_sources(loaded, True)
    posted: list[tuple[str, str, int]] = []
    sizer = EpochSizer(loaded.job, lambda q, s, b: posted.append((q, s, b)))
    coordinator = _coordinator(sources)
    sizer.watch(coordinator)
    assert coordinator.epoch_listeners == [sizer.observe]
    path_a = budget_path(sources["a"])
    assert path_a is not None and read_budget(path_a) == 100
    assert posted == [("out", "a", 100), ("out", "b", 100)]
    sizer.observe("out", _record(0, 0, 100, 4000))
    assert read_budget(path_a) == 100, "the run's first epoch (start-up) does not shrink"
    sizer.observe("out", _record(1, 100, 200, 100))
    assert read_budget(path_a) == 800, "short and capped: ramps up (at most 8x)"
    sizer.observe("out", _record(2, 200, 1000, 300, skipped_tasks=1))
    sizer.observe("out", _record(2, 200, 1000, 300, outcome="failed"))
    assert read_budget(path_a) == 800, "replayed-and-skipped or failed epochs teach nothing"
    sizer.observe("out", _record(2, 200, 1000, 2000))
    assert read_budget(path_a) == 400, "long: shrinks to what fits the target"
    assert sizer.budgets() == {("out", "a"): 400, ("out", "b"): 100}, "b admitted nothing: unchanged"
    again = EpochSizer(loaded.job)
    again.watch(_coordinator(job_sources(loaded, False)))
    assert again.budgets()[("out", "a")] == 400, "a restart resumes at the learned budget"


def test_admitted_counts_only_the_sources_topics() -> None:
    source = SimpleNamespace(reads=lambda topic: topic.startswith("ta"))
    starts = {"ta": {"0": 5, "1": 0}, "tb": {"0": 0}}
    ends = {"ta": {"0": 15, "1": 7}, "tb": {"0": 100}, "ta2": {"0": 3}}
    assert admitted(source, starts, ends) == 10 + 7  # type: ignore[arg-type]


def test_a_stateful_query_sizes_its_epochs_for_a_quarter_of_fixed_cost(tmp_path: Path) -> None:
    """A stateful query whose epochs cost 600 ms whatever they carry aims at 4 x 600 ms under a backlog, not at
    the 1 s target (where the same epochs would be 60 % fixed cost), nor at 1.5 x 600 ms as a stateless one."""
    aims = {}
    for stateful in (False, True):
        folder = tmp_path / str(stateful)
        folder.mkdir()
        loaded = _job(folder, "epoch.min.records=100\nepoch.max.records=1000000\ntrigger.interval.ms=1000\n")
        sources = job_sources(loaded, True)
        sizer = EpochSizer(loaded.job)
        sizer.watch(_coordinator(sources, stateful))
        offset, budget = 0, 100
        for epoch in range(30):  # 600 ms fixed + 0.1 ms per record, always a backlog
            sizer.observe("out", _record(epoch, offset, offset + budget, round(600 + 0.1 * budget)))
            offset += budget
            budget = sizer.budgets()[("out", "a")]
        aims[stateful] = 600 + 0.1 * budget
    assert 800 <= aims[False] <= 1200, aims
    assert 2000 <= aims[True] <= 2800, aims
