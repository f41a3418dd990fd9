"""Per-operator rows of every committed epoch: an epoch annotator reading the SQL metrics of the plan the epoch ran.

The coordinator calls annotators on the query's own thread, inside `foreachBatch`, after the epoch's write returned:
the query's `lastExecution` is then the epoch's, and its physical plan's SQL metrics hold the whole epoch (Spark
merges task metrics on the driver before an action returns). `OperatorCounter` reads them there
(`operator_rows.read_plan`: one py4j walk of the plan per epoch and query, on the driver; nothing per record),
attributes them to the graph's operators (`operator_rows.operator_rows`), adds them to the job's metrics (the
web UI's live figures) and returns them for the epoch's history entry (`EpochRecord.operators`).

It must never fail or slow an epoch noticeably: any error is logged once per query at INFO and the epoch gets no
figures. The cost is measured by `bench/operator_rows_cost.py`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ethereal_kafka.runtime.operator_rows import chained_rows, operator_rows, read_plan
from ethereal_kafka.runtime.spark_progress import streaming_query

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ethereal_kafka.checkpoint.history import EpochRecord
    from ethereal_kafka.runtime.metrics import JobMetrics

log = logging.getLogger(__name__)


class OperatorCounter:
    """An epoch annotator (`CheckpointCoordinator.epoch_annotators`) giving committed epochs their per-operator
    rows: `{"operators": {node id: [rows in, rows out]}}` (None where not available).

    Args:
        spark: The session the queries run on.
        app_id: The app (queries are named `{app_id}-{query}`).
        description: The run's stream graph (`plan.describe`).
        metrics: The job's metrics, which keep the run's totals (None: only the history gets them).
    """

    def __init__(
        self,
        spark: SparkSession,
        app_id: str,
        description: Mapping[str, Any],
        metrics: JobMetrics | None = None,
    ) -> None:
        self._spark = spark
        self._app_id = app_id
        self._description = description
        self._metrics = metrics
        self._queries: dict[str, Any] = {}
        self._failed: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, query: str, record: EpochRecord, tasks: Any = ()) -> dict[str, Any] | None:
        """The epoch's per-operator rows (committed epochs only; None when they cannot be read). A chained query's
        come from its tasks' summary rows (`operator_rows`), as its operators have no Spark nodes."""
        if record.outcome != "committed":
            return None
        try:
            steps = _chained_steps(tasks)
            if steps is not None:
                rows = chained_rows(self._description, query, steps)
            else:
                execution = self._execution(query)
                if execution is None or int(execution.currentBatchId()) != record.epoch:
                    return None
                rows = operator_rows(self._description, query, read_plan(execution.executedPlan()))
        except Exception as exc:  # figures for people: never fail the epoch
            if query not in self._failed:
                self._failed.add(query)
                log.info("no per-operator figures for query %s: %s", query, exc)
            return None
        if self._metrics is not None:
            self._metrics.add_operator_rows(query, rows)
        return {"operators": {nid: [rows_in, rows_out] for nid, (rows_in, rows_out) in rows.items()}}

    def _execution(self, query: str) -> Any:
        """The JVM `IncrementalExecution` of the query's current epoch (its `StreamExecution` is looked up once)."""
        with self._lock:
            handle = self._queries.get(query)
            if handle is None:
                handle = self._queries[query] = streaming_query(self._spark, f"{self._app_id}-{query}")
        return handle.lastExecution() if handle is not None else None


def _chained_steps(tasks: Any) -> list[int] | None:
    """A chained query's rows out of each step, summed over the epoch's tasks; None for an unchained query."""
    sums: list[int] | None = None
    for task in tasks or ():
        steps = task["operator_rows"]
        if steps is None:
            return None
        sums = (
            [int(n) for n in steps]
            if sums is None
            else [a + int(b) for a, b in zip(sums, steps, strict=True)]
        )
    return sums
