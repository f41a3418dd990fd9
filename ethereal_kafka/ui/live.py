"""The web UI of a running job, served from the driver by `ethereal-kafka run` (`ui.enabled`, `ui.host`, `ui.port`).

The runner opens it before the job starts (`runtime.runner.open_ui`, so a busy port stops the start) and calls
`watch()` once the coordinator is prepared. From then on the job's only cost is the epoch listener, which appends
each epoch record to a bounded list (O(1), on the coordinator's thread); everything else is computed when a page
asks, on the server's threads, from what the job's metrics already keep (`JobMetrics.figures()`). Epochs recorded
before this run (earlier runs of the app) are read once from the checkpoint history, at `watch()`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ethereal_kafka.checkpoint.history import CheckpointHistory, EpochRecord, HistoryError
from ethereal_kafka.ui import views
from ethereal_kafka.ui.server import UiServer

if TYPE_CHECKING:
    from ethereal_kafka.eos.coordinator import CheckpointCoordinator
    from ethereal_kafka.runtime.description import RunDescription
    from ethereal_kafka.runtime.metrics import JobMetrics

log = logging.getLogger(__name__)

#: Epochs kept in memory for the timeline (this run's and, read at start, the newest earlier ones).
MAX_EPOCHS = 5000
#: Earlier epochs read from the history when the UI starts.
EARLIER_EPOCHS = 2000


class LiveUi:
    """The UI data of one job run in this process, and its server (`serve`).

    Thread-safe: `on_epoch` runs on the coordinator's thread, the other methods on the server's threads.
    """

    def __init__(self, metrics: JobMetrics) -> None:
        self.metrics = metrics
        self.description: RunDescription | None = None
        self.server: UiServer | None = None
        self._lock = threading.Lock()
        self._epochs: deque[tuple[int, EpochRecord]] = deque(maxlen=MAX_EPOCHS)
        self._next_seq = 0

    @classmethod
    def serve(cls, metrics: JobMetrics, host: str = "127.0.0.1", port: int = 0) -> LiveUi:
        """Start serving the UI of the job `metrics` belongs to; logs its address (`ui at http://...`).

        Raises:
            ConfigError: the address cannot be bound (`ui.port=...: cannot listen on ...`).
        """
        ui = cls(metrics)
        ui.server = UiServer(ui, host, port)
        log.info("ui at %s", ui.server.url)
        return ui

    @property
    def url(self) -> str | None:
        """The UI's address, while it is served."""
        return self.server.url if self.server is not None else None

    def watch(self, coordinator: CheckpointCoordinator, description: RunDescription) -> None:
        """Take the run's description, read the app's earlier epochs, and listen to the coordinator's epochs
        (called by the runner before the queries start)."""
        self.description = description
        earlier = _earlier_epochs(description.app_id)
        with self._lock:
            for seq, record in earlier:
                self._epochs.append((seq, record))
            self._next_seq = (earlier[-1][0] + 1) if earlier else 0
        coordinator.epoch_listeners.append(self.on_epoch)

    def on_epoch(self, query: str, record: EpochRecord, _tasks: list[Any]) -> None:
        """Keep one epoch outcome (an epoch listener: cheap, never raises)."""
        with self._lock:
            self._epochs.append((self._next_seq, record))
            self._next_seq += 1

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self.server is not None:
            self.server.close()
            self.server = None

    # -- UiData ----------------------------------------------------------------------------------------------------
    def overview(self) -> dict[str, Any]:
        """The job page."""
        desc = self.description
        base: dict[str, Any] = {
            "mode": "live",
            "app_id": self.metrics.app_id,
            "now_ms": int(time.time() * 1000),
        }
        if desc is None:
            return base
        from dataclasses import asdict

        fields = asdict(desc)
        fields.pop("plan", None)
        return {**fields, **base, "running": True}

    def plan(self) -> dict[str, Any]:
        """The stream graph of this run."""
        return (
            self.description.plan
            if self.description is not None
            else {"queries": [], "nodes": [], "edges": []}
        )

    def epochs(self, after: int) -> dict[str, Any]:
        """The epochs kept with `seq > after`."""
        with self._lock:
            picked = [(s, r) for s, r in self._epochs if s > after]
            last = self._next_seq - 1
        return {"entries": [views.epoch_json(s, r) for s, r in picked], "next": max(after, last)}

    def live(self) -> dict[str, Any] | None:
        """The live metrics."""
        return self.metrics.figures()

    def latency(self) -> dict[str, Any]:
        """Whole-run percentiles: from the histograms the metrics endpoint exports."""
        since = self.description.started_ms if self.description is not None else None
        return {
            "source": "metrics endpoint (ethereal_kafka_end_to_end_latency_seconds, summed over sources)",
            "since_ms": since,
            "queries": views.latency_from_figures(self.metrics.figures()),
        }

    def decisions(self) -> dict[str, Any]:
        """Auto-scaling decisions recorded through `JobMetrics.record_decision`."""
        decisions = self.metrics.figures()["decisions"]
        return {"available": bool(decisions), "decisions": decisions}


def _earlier_epochs(app_id: str) -> list[tuple[int, EpochRecord]]:
    """The newest epochs the app's history holds (none when it has no history yet)."""
    try:
        with CheckpointHistory(app_id, read_only=True) as history:
            return history.entries_after(-1, EARLIER_EPOCHS)
    except HistoryError as exc:
        log.debug("no earlier epochs for the ui: %s", exc)
        return []
