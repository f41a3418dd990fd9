"""The job's epoch sizer: adaptive admission on the driver, fed by the checkpoint coordinator's epoch outcomes.

`EpochSizer.watch(coordinator)` (called by the runner after `prepare()`, before the queries start) posts each
source's first budget and subscribes to the coordinator's epoch outcomes. After every committed epoch of a query it
decides, per source the query reads, the budget of the query's next epoch (`admission.next_budget`) and posts it in
the checkpoint, where the source's `latestOffset` reads it (`admission.read_budget`): the only channel between this
process and the Python process in which Spark runs the source's planning.

Measured inputs: the epoch's duration (`EpochRecord.duration_ms`, from the `foreachBatch` call to its commit) and
the offsets each source admitted into it (end - start offsets of the source's partitions). Whether more records
were waiting is read from the budget itself: an epoch that admitted its whole budget was capped by it.
Epochs that re-ran after a restart and found their tasks committed before (skipped sink tasks) teach nothing and
are ignored; so are failed epochs. A run's first measured epoch may grow the budget but not shrink it, and is left
out of the cost model (its time is mostly start-up: Python workers, JIT, first connections). The last
`HISTORY` observations per source give the fixed cost per epoch (`admission.fixed_cost_ms`): when it alone comes
near the target, the sizer aims above the target rather than shrink epochs into pure overhead.

Nothing here changes what a replay reads: a budget is posted after epoch N commits and is read when Spark plans
epoch N+1, before Spark logs N+1's end offsets.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.config.job import Guarantee
from ethereal_kafka.connectors.kafka.admission import (
    FIXED_COST_HEADROOM,
    HISTORY,
    STATEFUL_FIXED_COST_HEADROOM,
    AdmissionSettings,
    CostModel,
    Observation,
    budget_path,
    cost_model,
    next_budget,
    post_budget,
    read_budget,
    read_history,
)

if TYPE_CHECKING:
    from ethereal_kafka.checkpoint.history import EpochRecord
    from ethereal_kafka.config.job import JobConfig
    from ethereal_kafka.eos.coordinator import CheckpointCoordinator

log = logging.getLogger(__name__)


def admission_settings(
    job: JobConfig, source: KafkaSourceConfig, stateful: bool = False
) -> AdmissionSettings:
    """The sizing bounds of `source` in `job`: the job's target and bounds, the source's `max.records.per.epoch`
    (when set) lowering the maximum (and the minimum with it); a stateful query's epochs get the larger headroom
    over their fixed cost (`STATEFUL_FIXED_COST_HEADROOM`); under exactly-once no aim beyond half the transaction
    timeout (`AdmissionSettings.longest_ms`: the sizer, not a floor rate, keeps epochs within it)."""
    ceiling = job.epoch_max_records
    if source.max_records_per_epoch > 0:
        ceiling = min(ceiling, source.max_records_per_epoch)
    headroom = STATEFUL_FIXED_COST_HEADROOM if stateful else FIXED_COST_HEADROOM
    longest = job.transaction_timeout_ms // 2 if job.delivery_guarantee == Guarantee.EXACTLY_ONCE else 0
    return AdmissionSettings(
        job.epoch_target, min(job.epoch_min_records, ceiling), ceiling, headroom, longest
    )


def sized_source(job: JobConfig, source: KafkaSourceConfig) -> dict[str, object]:
    """The changes the runner applies to a source of `job` for its sizing mode (fields of `KafkaSourceConfig`):
    with adaptive sizing the source reads posted budgets, and its `max.records.per.epoch` becomes the sizing
    maximum (so Spark's `ReadMaxRows` never lets an epoch past it)."""
    if job.epoch_sizing != "adaptive":
        return {}
    return {"epoch_sizing": "adaptive", "max_records_per_epoch": admission_settings(job, source).max_records}


@dataclass
class _Sized:
    query: str
    source: KafkaSourceConfig
    path: Path
    settings: AdmissionSettings
    budget: int
    history: deque[Observation] = field(default_factory=lambda: deque(maxlen=HISTORY))
    model: CostModel | None = None
    learned: bool = False


class EpochSizer:
    """Adaptive admission for one job run (driver side; thread-safe: the coordinator calls `observe` from Spark's
    query threads).

    Args:
        job: The job (target and bounds).
        on_budget: Told `(query, source, budget)` whenever a budget is posted (the metrics' gauge).
    """

    def __init__(self, job: JobConfig, on_budget: Callable[[str, str, int], None] | None = None) -> None:
        self.job = job
        self._on_budget = on_budget
        self._lock = threading.Lock()
        self._sized: dict[str, list[_Sized]] = {}

    def watch(self, coordinator: CheckpointCoordinator) -> None:
        """Post every adaptive source's first budget and observe the coordinator's epochs (call after `prepare()`,
        before the queries start).

        A budget posted by an earlier run of the same checkpoint is kept (within the current bounds): a restart
        resumes at the size the job had learned. Otherwise the first epoch admits `epoch.min.records`.
        """
        if self.job.epoch_sizing != "adaptive":
            return
        for query, shape in coordinator.queries.items():
            for source in coordinator.query_sources(query):
                path = budget_path(source)
                if path is None:
                    continue
                settings = admission_settings(self.job, source, shape.stateful)
                budget = settings.clamp(read_budget(path) or settings.min_records)
                entry = _Sized(query, source, path, settings, budget)
                entry.history.extend(read_history(path))
                entry.model = cost_model(entry.history, settings.min_records)
                self._post(entry, None, "start")
                self._sized.setdefault(query, []).append(entry)
        coordinator.epoch_listeners.append(self.observe)

    def budgets(self) -> dict[tuple[str, str], int]:
        """`{(query, source): budget}` as posted now."""
        with self._lock:
            return {(e.query, e.source.name): e.budget for es in self._sized.values() for e in es}

    def observe(self, query: str, record: EpochRecord, tasks: Sequence[Any] = ()) -> None:
        """Decide and post the next budgets of `query`'s sources after one of its epochs (an epoch listener)."""
        if record.outcome != "committed" or record.skipped_tasks or record.records_in < 0:
            return
        with self._lock:
            for entry in self._sized.get(query, ()):
                records = admitted(entry.source, record.start_offsets, record.end_offsets)
                if entry.learned and records > 0:
                    entry.history.append((records, record.duration_ms))
                    entry.model = cost_model(entry.history, entry.settings.min_records) or entry.model
                step = next_budget(
                    entry.budget,
                    records,
                    record.duration_ms,
                    entry.settings,
                    may_shrink=entry.learned,
                    model=entry.model,
                    recent=list(entry.history),
                )
                entry.learned = entry.learned or records > 0
                if step.budget != entry.budget:
                    log.debug(
                        "epoch sizing %s/%s after epoch %d: %s %d -> %d (%s)",
                        query,
                        entry.source.name,
                        record.epoch,
                        step.action,
                        entry.budget,
                        step.budget,
                        step.reason,
                    )
                entry.budget = step.budget
                self._post(entry, record.epoch, f"{step.action}: {step.reason}")

    def _post(self, entry: _Sized, epoch: int | None, reason: str) -> None:
        try:
            post_budget(entry.path, entry.budget, epoch, reason, list(entry.history))
        except OSError as exc:
            # The source then keeps reading the last budget it could read (or its maximum): never a wrong range.
            log.warning("epoch budget of %s not posted to %s: %s", entry.source.name, entry.path, exc)
        if self._on_budget is not None:
            self._on_budget(entry.query, entry.source.name, entry.budget)


def admitted(
    source: KafkaSourceConfig, starts: Mapping[str, Mapping[str, int]], ends: Mapping[str, Mapping[str, int]]
) -> int:
    """Offsets an epoch admitted from `source`'s topics (end - start, summed over its partitions)."""
    total = 0
    for topic, parts in ends.items():
        if not source.reads(topic):
            continue
        before = starts.get(topic, {})
        total += sum(max(0, int(end) - int(before.get(p, end))) for p, end in parts.items())
    return total
