"""Adaptive admission: how many records the next epoch of a source admits, and where that number is posted.

Two processes take part (see docs/exactly-once.md, "Adaptive epoch sizing"):

- The **job's epoch sizer** runs in the driver's Python process, where the checkpoint coordinator measures each
  epoch (`runtime.admission`). After every committed epoch it calls `next_budget` and posts the result in the
  query's checkpoint folder (`post_budget`).
- The **source's `latestOffset`** runs in the Python process Spark starts for the streaming source
  (`pyspark/sql/streaming/python_streaming_source_runner.py`: a child of the driver JVM, not the driver's Python
  process), on the same host as the driver. It reads the posted budget (`read_budget`) and admits at most that many
  offsets into the next epoch, never more than the `ReadMaxRows` limit Spark passes.

Spark calls `latestOffset` for epoch N+1 only after epoch N's `foreachBatch` returned, so the budget it reads
already accounts for epoch N. Spark logs the end offsets `latestOffset` returned before the epoch runs and replays a
logged epoch from its log without asking the source again: the budget only ever shapes epochs not logged yet, so
replays read the same ranges whatever the sizer decides later.

Everything here but the two file functions is pure.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ethereal_kafka.config.connectors import KafkaSourceConfig

#: Largest factor by which one epoch's budget may exceed the previous one.
GROWTH_LIMIT = 4.0
#: Epochs within this fraction of the target keep their budget (no chasing noise).
TOLERANCE = 0.1


@dataclass(frozen=True)
class AdmissionSettings:
    """Bounds of adaptive sizing for one source.

    Attributes:
        target_ms: The epoch duration (the coordinator's `foreachBatch` → commit time) aimed at.
        min_records: The least budget (and the first epoch's).
        max_records: The largest budget (the source's `max.records.per.epoch`).
    """

    target_ms: int
    min_records: int
    max_records: int

    def clamp(self, records: float) -> int:
        """`records` within `[min_records, max_records]`."""
        return max(self.min_records, min(self.max_records, int(records)))


@dataclass(frozen=True)
class BudgetStep:
    """One decision of the sizer: the next budget and why."""

    budget: int
    action: str  # grow | shrink | hold
    reason: str


def next_budget(
    budget: int, records: int, duration_ms: int, settings: AdmissionSettings, may_shrink: bool = True
) -> BudgetStep:
    """The budget of the next epoch, from the last epoch's budget, records and duration.

    The estimate `records x target / duration` is the size that fills the target at the rate just seen. With a
    per-epoch fixed cost it underestimates what fits while epochs are short (so growing towards it never overshoots
    the target) and overestimates it while they run long (so shrinking converges from above).

    - Short epoch (below target by more than `TOLERANCE`) that used its whole budget (so more records were
      waiting): grow to the estimate, at most `GROWTH_LIMIT` times the budget.
    - Long epoch (above target by more than `TOLERANCE`): shrink to the estimate (unless `may_shrink` is False:
      the sizer passes that for a run's first epoch, whose time is mostly start-up).
    - Otherwise: hold.
    The result always lies within the settings' bounds.
    """
    budget = settings.clamp(budget)
    if records <= 0 or duration_ms <= 0:
        return BudgetStep(budget, "hold", "empty epoch")
    target = settings.target_ms
    estimate = records * target / duration_ms
    seen = f"{records} records in {duration_ms} ms (target {target} ms)"
    if duration_ms < target * (1 - TOLERANCE):
        if records < budget:
            return BudgetStep(budget, "hold", f"{seen}, backlog below the budget")
        grown = settings.clamp(min(estimate, budget * GROWTH_LIMIT))
        if grown <= budget:
            return BudgetStep(budget, "hold", f"{seen}, at epoch.max.records")
        return BudgetStep(grown, "grow", f"{seen} with more waiting")
    if duration_ms > target * (1 + TOLERANCE):
        if not may_shrink:
            return BudgetStep(budget, "hold", f"{seen}, first epoch of the run (start-up)")
        shrunk = settings.clamp(estimate)
        if shrunk >= budget:
            return BudgetStep(budget, "hold", f"{seen}, at epoch.min.records")
        return BudgetStep(shrunk, "shrink", seen)
    return BudgetStep(budget, "hold", f"{seen}, on target")


def budget_path(config: KafkaSourceConfig) -> Path | None:
    """Where the budget of `config`'s reads is posted: in the job's checkpoint, one file per source and consumer
    group (a query reading a source several queries read has a group of its own); None without adaptive sizing or
    a checkpoint."""
    if config.epoch_sizing != "adaptive" or not config.checkpoint_location:
        return None
    return (
        Path(config.checkpoint_location)
        / "ethereal-kafka"
        / f"epoch-budget-{config.name}@{config.group}.json"
    )


def post_budget(path: Path, budget: int, epoch: int | None, reason: str) -> None:
    """Replace the posted budget atomically (the reader sees the old file or the new one, never a torn one).

    Called by the job's epoch sizer only (one writer per file).

    Raises:
        OSError: the checkpoint folder cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(
        json.dumps({"budget": int(budget), "after_epoch": epoch, "reason": reason}), encoding="utf-8"
    )
    os.replace(partial, path)


def read_budget(path: Path) -> int | None:
    """The posted budget, or None when nothing usable is posted (the reader then admits up to Spark's limit)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("budget")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None
