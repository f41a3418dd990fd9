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

Everything here but the file functions is pure.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ethereal_kafka.config.connectors import KafkaSourceConfig

#: Largest factor by which one epoch's budget may exceed the previous one.
GROWTH_LIMIT = 4.0
#: Epochs within this fraction of the target keep their budget (no chasing noise).
TOLERANCE = 0.1
#: When an epoch's fixed cost alone comes near the target, the sizer aims at this multiple of the fixed cost
#: instead: shrinking epochs whose time is mostly fixed cost would only multiply that cost.
FIXED_COST_HEADROOM = 1.5
#: The same for a stateful query (windows, joins, keyed state): its fixed cost per epoch is larger (two stages, a
#: shuffle, the state store's commit) and its output waits for windows and watermarks of seconds anyway, so while a
#: backlog waits its epochs are sized for the fixed cost to be at most a quarter of an epoch.
STATEFUL_FIXED_COST_HEADROOM = 4.0
#: Two epochs tell the per-record cost apart from the fixed cost only when their sizes differ at least this much.
SIZE_SPREAD = 0.25
#: Epochs remembered per source for the fixed-cost estimate.
HISTORY = 8
#: Epochs whose median estimate must agree with the last one's before the budget grows (noise damping).
SMOOTHING = 3
#: An epoch this many times the aim shrinks the budget at once, whatever the epochs before it say.
RUNAWAY = 1.5
#: An epoch shorter than this fraction of the aim, with more records waiting, is part of the ramp from a small
#: budget: the next one is sized without waiting for `SMOOTHING` epochs to agree.
RAMP = 0.5
#: A growing budget lets the next epoch take at most this multiple of the aim even if every millisecond of the
#: last one was per-record cost (the worst case: durations grow at most in proportion to the records), so a step
#: that the cost model got wrong stays under twice the target.
STEP_CEILING = 1.5
#: Largest factor by which one ramp step may grow the budget.
RAMP_GROWTH_LIMIT = 8.0

Observation = tuple[int, int]  # (records admitted, duration in ms) of one epoch


@dataclass(frozen=True)
class AdmissionSettings:
    """Bounds of adaptive sizing for one source.

    Attributes:
        target_ms: The epoch duration (the coordinator's `foreachBatch` → commit time) aimed at.
        min_records: The least budget (and the first epoch's).
        max_records: The largest budget (the source's `max.records.per.epoch`).
        fixed_cost_headroom: The multiple of the fixed cost per epoch aimed at when that is above the target
            (`FIXED_COST_HEADROOM`; `STATEFUL_FIXED_COST_HEADROOM` for stateful queries).
        longest_ms: The longest duration ever aimed at, whatever the fixed cost (under exactly-once half the
            transaction timeout: an epoch then takes at most `STEP_CEILING` x that); 0 = no limit.
    """

    target_ms: int
    min_records: int
    max_records: int
    fixed_cost_headroom: float = FIXED_COST_HEADROOM
    longest_ms: int = 0

    def clamp(self, records: float) -> int:
        """`records` within `[min_records, max_records]`."""
        return max(self.min_records, min(self.max_records, int(records)))


@dataclass(frozen=True)
class BudgetStep:
    """One decision of the sizer: the next budget and why."""

    budget: int
    action: str  # grow | shrink | hold
    reason: str


@dataclass(frozen=True)
class CostModel:
    """What an epoch costs: `fixed_ms + per_record_ms x records` (`per_record_ms` None when unknown)."""

    fixed_ms: float
    per_record_ms: float | None = None


def cost_model(history: Sequence[Observation], min_records: int = 0) -> CostModel | None:
    """The cost per epoch estimated from `(records, duration_ms)` observations, or None when nothing tells.

    Robust to noisy durations (a shared machine): the per-record cost is the median slope over pairs of
    observations whose sizes differ by at least `SIZE_SPREAD` (Theil-Sen), the fixed cost the median intercept,
    kept within `[0, shortest duration]`. Without such pairs, an epoch of at most `min_records` records is taken as
    all fixed cost (its shortest duration bounds the fixed cost from above): so a sizer stuck at its minimum because
    even the smallest epochs run long learns that and grows out of it.
    """
    seen = list(history)
    slopes = []
    for i, (n1, d1) in enumerate(seen):
        for n2, d2 in seen[i + 1 :]:
            if abs(n1 - n2) >= SIZE_SPREAD * max(n1, n2) and n1 != n2:
                slopes.append((d2 - d1) / (n2 - n1))
    if not slopes:
        smallest = [d for n, d in seen if n <= min_records]
        return CostModel(float(min(smallest))) if smallest else None
    per_record = max(0.0, statistics.median(slopes))
    intercept = statistics.median(d - per_record * n for n, d in seen)
    return CostModel(max(0.0, min(float(min(d for _, d in seen)), intercept)), per_record)


def aimed_ms(settings: AdmissionSettings, model: CostModel | None) -> int:
    """The duration the sizer aims at: the target, or the settings' `fixed_cost_headroom` x the fixed cost when that
    is more (a target below what an epoch costs anyway cannot be met by admitting fewer records), never more than
    the settings' `longest_ms` (when set)."""
    if model is None:
        return settings.target_ms
    aim = max(settings.target_ms, math.ceil(settings.fixed_cost_headroom * model.fixed_ms))
    if settings.longest_ms:
        aim = min(aim, max(settings.target_ms, settings.longest_ms))
    return aim


def next_budget(
    budget: int,
    records: int,
    duration_ms: int,
    settings: AdmissionSettings,
    may_shrink: bool = True,
    model: CostModel | None = None,
    recent: Sequence[Observation] = (),
) -> BudgetStep:
    """The budget of the next epoch, from the last epoch's budget, records and duration, the cost model when known
    (`cost_model`; it sets the aimed duration, `aimed_ms`) and the recent epochs (`(records, duration_ms)`, the last
    one included) that damp noise.

    The estimate `records x aim / duration` is the size that fills the aimed duration at the rate just seen. With
    a per-epoch fixed cost it underestimates what fits while epochs are short (so growing towards it never
    overshoots) and overestimates it while they run long (so shrinking converges from above). On a shared machine
    single epochs are noisy: the same estimate over the last `SMOOTHING` epochs (their median) must agree before
    the budget grows, and keeps one slow epoch among fast ones from shrinking it.

    - Short epoch (below the aim by more than `TOLERANCE`) that used its whole budget (so more records were
      waiting): grow to the size the cost model predicts fills the aim (`(aim - fixed) / per-record`), or, when
      that is less or unknown, to the estimate (damped: the smaller of the last epoch's and the median of the last
      `SMOOTHING` epochs'). Whatever the prediction, the step is capped as if every millisecond of the last epoch
      had been per-record cost: at most `STEP_CEILING` x aim / duration times the records, so a wrong model
      costs at most an epoch of `STEP_CEILING` x the aim, and at most `GROWTH_LIMIT` times the budget. By more
      than `TOLERANCE`, or not at all.
    - Ramp: the same, for an epoch shorter than `RAMP` x the aim when no recent epoch of about its size ran longer
      (a budget still far below what fits, not one fast epoch among steady ones): no damping, and up to
      `RAMP_GROWTH_LIMIT` times (without a cost model, straight to the cap). Fixed cost dominates small epochs,
      so the rate-based estimate alone would climb out of a small budget only slowly.
    - Long epoch (above the aim by more than `TOLERANCE`): shrink to the larger of the two estimates (never above
      the budget; by more than `TOLERANCE`, or not at all), or straight to the last epoch's estimate when it ran
      past `RUNAWAY` x the aim (unless
      `may_shrink` is False: the sizer passes that for a run's first epoch, whose time is mostly start-up).
    - Otherwise: hold.
    The result always lies within the settings' bounds.
    """
    budget = settings.clamp(budget)
    if records <= 0 or duration_ms <= 0:
        return BudgetStep(budget, "hold", "empty epoch")
    target = aimed_ms(settings, model)
    estimate = records * target / duration_ms
    last = list(recent)[-SMOOTHING:]
    steady = (
        statistics.median(n * target / d for n, d in last if d > 0) if len(last) == SMOOTHING else estimate
    )
    aim = f"target {target} ms"
    if model is not None and target != settings.target_ms:
        aim = f"aim {target} ms: fixed cost {model.fixed_ms:.0f} ms"
    seen = f"{records} records in {duration_ms} ms ({aim})"
    if duration_ms < target * (1 - TOLERANCE):
        if records < budget:
            return BudgetStep(budget, "hold", f"{seen}, backlog below the budget")
        ramp = duration_ms < target * RAMP and _ramping(records, target, recent)
        # Worst case: every millisecond of the last epoch was per-record cost.
        ceiling = records * min(
            RAMP_GROWTH_LIMIT if ramp else GROWTH_LIMIT, STEP_CEILING * target / duration_ms
        )
        fill = _fill(target, model)
        if fill is not None:
            predicted = max(estimate if ramp else min(estimate, steady), fill)
        else:
            predicted = ceiling if ramp else min(estimate, steady)
        grown = settings.clamp(min(ceiling, predicted))
        if grown <= budget * (1 + TOLERANCE) and grown < settings.max_records:
            return BudgetStep(budget, "hold", f"{seen}, recent epochs slower or at epoch.max.records")
        return BudgetStep(grown, "grow", f"{seen} with more waiting" + (" (ramp)" if ramp else ""))
    if duration_ms > target * (1 + TOLERANCE):
        if not may_shrink:
            return BudgetStep(budget, "hold", f"{seen}, first epoch of the run (start-up)")
        runaway = duration_ms > target * RUNAWAY
        shrunk = settings.clamp(estimate if runaway else max(estimate, min(steady, budget)))
        if shrunk >= budget or (not runaway and shrunk >= budget * (1 - TOLERANCE)):
            return BudgetStep(budget, "hold", f"{seen}, recent epochs faster or at epoch.min.records")
        return BudgetStep(shrunk, "shrink", seen)
    return BudgetStep(budget, "hold", f"{seen}, on target")


def _fill(target: int, model: CostModel | None) -> float | None:
    """The size the cost model predicts fills `target` ms, or None when the model knows no per-record cost."""
    if model is None or not model.per_record_ms:
        return None
    return max(0.0, target - model.fixed_ms) / model.per_record_ms


def _ramping(records: int, target: int, recent: Sequence[Observation]) -> bool:
    """Whether no recent epoch of about `records` records (within `TOLERANCE`) ran `RAMP` x `target` or longer:
    then a short epoch is not noise among steady ones but a budget still far below what fits."""
    return all(d < target * RAMP for n, d in recent if n >= records * (1 - TOLERANCE))


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


def post_budget(
    path: Path, budget: int, epoch: int | None, reason: str, history: Sequence[Observation] = ()
) -> None:
    """Replace the posted budget atomically (the reader sees the old file or the new one, never a torn one), with
    the sizer's recent observations (so a restart resumes with what it learned).

    Called by the job's epoch sizer only (one writer per file).

    Raises:
        OSError: the checkpoint folder cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    body = {
        "budget": int(budget),
        "after_epoch": epoch,
        "reason": reason,
        "history": [list(o) for o in history],
    }
    partial.write_text(json.dumps(body), encoding="utf-8")
    os.replace(partial, path)


def read_budget(path: Path) -> int | None:
    """The posted budget, or None when nothing usable is posted (the reader then admits up to Spark's limit)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("budget")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def read_history(path: Path) -> list[Observation]:
    """The observations posted with the budget (empty when there are none or the file is unusable)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8")).get("history") or []
        return [(int(n), int(d)) for n, d in raw][-HISTORY:]
    except (OSError, ValueError, AttributeError, TypeError):
        return []
