"""The web UI of an app that is not running here: `ethereal-kafka ui APP` reads what its runs left on this host.

- The stream graph and the job page come from the last run's description (`runtime.description`, written by
  `ethereal-kafka run` at start: the plan as it ran, the configuration with secrets masked). An app last run by a
  version that wrote none is described from its job file: the DataStream graph when the pipeline function builds
  it without Spark, else its queries and connectors.
- The checkpoint timeline and the latency page come from the checkpoint history, read as a secondary RocksDB
  instance, so the same pages also follow an app that is running in another process.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ethereal_kafka.checkpoint.history import CheckpointHistory, EpochRecord
from ethereal_kafka.config.job import LoadedJob
from ethereal_kafka.runtime.description import RunDescription
from ethereal_kafka.ui import views

log = logging.getLogger(__name__)

#: Epochs read from the history at most (the newest).
MAX_EPOCHS = 5000


class HistoryUi:
    """The UI data of a stopped (or elsewhere running) app, from its checkpoint history and run description.

    Args:
        description: The last run's description (see `describe_job_file` when none was recorded).
        history_path: The history directory (default: the app's).
    """

    def __init__(self, description: RunDescription, history_path: Path | None = None) -> None:
        self.description = description
        self._history_path = history_path
        self._lock = threading.Lock()
        self._history: CheckpointHistory | None = None
        self._epochs: list[tuple[int, EpochRecord]] = []

    def close(self) -> None:
        """Close the history reader (idempotent)."""
        with self._lock:
            if self._history is not None:
                self._history.close()
                self._history = None

    def _read(self) -> list[tuple[int, EpochRecord]]:
        """Every kept epoch (the newest `MAX_EPOCHS`), catching up with a live writer.

        Raises:
            HistoryError: the app has no history (or it cannot be read).
        """
        with self._lock:
            if self._history is None:
                self._history = CheckpointHistory(self.description.app_id, self._history_path, read_only=True)
            after = self._epochs[-1][0] if self._epochs else -1
            self._epochs.extend(self._history.entries_after(after, MAX_EPOCHS))
            del self._epochs[:-MAX_EPOCHS]
            return list(self._epochs)

    # -- UiData ----------------------------------------------------------------------------------------------------
    def overview(self) -> dict[str, Any]:
        """The job page (from the last run's description)."""
        fields = asdict(self.description)
        fields.pop("plan", None)
        return {**fields, "mode": "history", "running": False, "now_ms": int(time.time() * 1000)}

    def plan(self) -> dict[str, Any]:
        """The stream graph of the last run."""
        return self.description.plan

    def epochs(self, after: int) -> dict[str, Any]:
        """The recorded epochs with `seq > after`."""
        entries = self._read()
        picked = [views.epoch_json(s, r) for s, r in entries if s > after]
        return {"entries": picked, "next": max([after] + [s for s, _ in entries[-1:]])}

    def live(self) -> dict[str, Any] | None:
        """None: no live figures for an app that is not running here."""
        return None

    def latency(self) -> dict[str, Any]:
        """Percentiles over the last run's committed epochs (the sum of their recorded histograms)."""
        since = self.description.started_ms
        records = [r for _, r in self._read() if r.started_ms >= since]
        return {
            "source": "recorded epochs of the last run (checkpoint history)",
            "since_ms": since,
            "queries": views.latency_from_epochs(records),
        }

    def decisions(self) -> dict[str, Any]:
        """No decisions are recorded for a stopped app (they live in the running job's metrics only)."""
        return {"available": False, "decisions": []}


def describe_job_file(loaded: LoadedJob, started_ms: int = 0) -> RunDescription:
    """A description of `loaded` made from its job file alone (for an app whose runs recorded none).

    The DataStream graph when the pipeline function builds it without a SparkSession (one using Spark column
    expressions needs one, and is then described by its queries and connectors, one query per sink).
    """
    from ethereal_kafka.plan.describe import describe_dataframe

    job = loaded.job
    plan = _graph_without_spark(loaded)
    if plan is None:
        plan = describe_dataframe(
            [(name, [name], []) for name in loaded.sinks],
            loaded.sources,
            loaded.sinks,
            job.delivery_guarantee,
            job.pipeline or "transform.sql",
        )
        plan["note"] = "described from the job file: queries and connectors only"
    described = RunDescription.of(loaded, plan, spark_master=job.spark_master)
    return RunDescription(**{**asdict(described), "started_ms": started_ms})


def _graph_without_spark(loaded: LoadedJob) -> dict[str, Any] | None:
    from ethereal_kafka.api.environment import StreamExecutionEnvironment
    from ethereal_kafka.plan.describe import describe_graph
    from ethereal_kafka.plan.sink_groups import group_sinks
    from ethereal_kafka.runtime.job import resolve_pipeline
    from ethereal_kafka.runtime.pipeline import is_graph_pipeline

    if loaded.job.pipeline is None:
        return None
    try:
        function: Any = resolve_pipeline(loaded.job.pipeline, loaded.path)
        if not is_graph_pipeline(function):
            return None
        env = StreamExecutionEnvironment.for_job(loaded)
        function(env)
        graph = env.graph()
        plans = group_sinks(graph, dict(loaded.sources))
    except Exception as exc:  # e.g. a Spark column expression without a session: fall back to connectors
        log.info("the pipeline's graph cannot be built without Spark (%s): showing its connectors", exc)
        return None
    return describe_graph(
        graph, plans, loaded.sources, loaded.sinks, loaded.job.delivery_guarantee, loaded.tables
    )
