"""A run's metrics wired in: `open_metrics` builds the bookkeeping (`runtime.metrics.JobMetrics`) and what feeds and
shows it (the report channel of the Python workers, the Spark progress listener, the Prometheus endpoint, the console
progress line, the lag filler); `RunMetrics` holds them for the run and stops them.

Nothing happens at import time: the endpoint, the listener and the report channel exist only between
`open_metrics()` and `RunMetrics.close()`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from ethereal_kafka.connectors.kafka.read_stats import ReadReport
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.plan.user_errors import UserErrorReport
from ethereal_kafka.runtime.lag_fill import LagFill
from ethereal_kafka.runtime.metrics import JobMetrics
from ethereal_kafka.runtime.progress import ProgressLine
from ethereal_kafka.runtime.spark import STATE_STORE_KEY, TRACK_ROWS_KEY, state_rows_counted
from ethereal_kafka.runtime.spark_progress import add_progress_listener

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ethereal_kafka.config.job import LoadedJob
    from ethereal_kafka.connectors.kafka.read_stats import ReportChannel
    from ethereal_kafka.eos.coordinator import CheckpointCoordinator

log = logging.getLogger(__name__)


class RunMetrics:
    """The metrics of one `ethereal-kafka run`: the bookkeeping and what feeds and shows it.

    Made by `open_metrics()` before the queries start; `watch()` hooks the coordinator (also before the queries
    start, so no epoch is missed); `close()` stops everything (idempotent).
    """

    def __init__(
        self,
        metrics: JobMetrics | None = None,
        channel: ReportChannel | None = None,
        server: Any = None,
        spark: SparkSession | None = None,
        listener: Any = None,
        progress: ProgressLine | None = None,
        lag_fill: LagFill | None = None,
    ) -> None:
        self.metrics = metrics
        self._channel = channel
        self._server = server
        self._spark = spark
        self._listener = listener
        self._progress = progress
        self._lag_fill = lag_fill

    @property
    def port(self) -> int | None:
        """The endpoint's port (None when it is disabled)."""
        return int(self._server.server_port) if self._server is not None else None

    def watch(
        self,
        coordinator: CheckpointCoordinator,
        side_outputs: Collection[str] = (),
        plan: Mapping[str, Any] | None = None,
    ) -> None:
        """Learn the coordinator's queries and receive its epoch outcomes (call after `prepare()`, before the
        queries start). `side_outputs`: names of sinks fed by a late-data side output; `plan`: the run's
        description (`plan.describe`), whose operators' names and uids label the operator metrics. Called again
        for each restart of the queries (a new coordinator): counters carry on."""
        if self.metrics is None:
            return
        if plan is not None:
            self.metrics.operators.describe(plan)
        for name, query in coordinator.queries.items():
            sources = [s.name for s in coordinator.query_sources(name)]
            self.metrics.add_query(name, [s.name for s in query.sinks], side_outputs, sources)
        coordinator.epoch_annotators.append(self.metrics.observe_epoch)
        if self._lag_fill is not None:
            for name in coordinator.queries:
                self._lag_fill.watch(name, coordinator.query_sources(name))
            coordinator.epoch_listeners.append(self._lag_fill.on_epoch)
            self._lag_fill.start()

    def start_progress(self) -> None:
        """Start the console progress line (when configured)."""
        if self._progress is not None:
            self._progress.start()

    def close(self) -> None:
        """Stop the progress line, the lag filler, the listener, the endpoint and the report channel."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._lag_fill is not None:
            self._lag_fill.close()
            self._lag_fill = None
        if self._listener is not None and self._spark is not None:
            try:
                self._spark.streams.removeListener(self._listener)
            except Exception:
                log.debug("could not remove the progress listener", exc_info=True)
            self._listener = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def open_metrics(spark: SparkSession, loaded: LoadedJob) -> RunMetrics:
    """Set up a run's metrics before its queries start: the report channel, the Prometheus endpoint
    (`metrics.enabled`), the progress listener and the console progress line (`progress`). The bookkeeping also
    exists when only the web UI (`ui.enabled`) needs it.

    Raises:
        ConfigError: the endpoint cannot listen on `metrics.host`:`metrics.port`.
    """
    from ethereal_kafka.connectors.kafka.read_stats import ReportChannel

    job = loaded.job
    if (
        not job.metrics_enabled
        and job.progress == "off"
        and not job.ui_enabled
        and job.autoscale_policy == "off"
    ):
        return RunMetrics()
    counted = state_rows_counted(
        {key: str(spark.conf.get(key, "")) for key in (STATE_STORE_KEY, TRACK_ROWS_KEY)}
    )
    metrics = JobMetrics(job.app_id, loaded.sources, state_rows_counted=counted)
    channel = ReportChannel(metrics.add_reports, kind=(ReadReport, UserErrorReport))
    channel.open()
    server = None
    try:
        if job.metrics_enabled:
            server = serve(metrics, job.metrics_host, job.metrics_port)
            host = job.metrics_host if ":" not in job.metrics_host else f"[{job.metrics_host}]"
            log.info("metrics at http://%s:%d/metrics", host, server.server_port)
        listener = add_progress_listener(spark, metrics.observe_progress)
    except BaseException:
        channel.close()
        if server is not None:
            server.shutdown()
            server.server_close()
        raise
    progress = ProgressLine.for_job(job, metrics.snapshot)
    return RunMetrics(metrics, channel, server, spark, listener, progress, LagFill(metrics))


def serve(metrics: JobMetrics, host: str, port: int) -> Any:
    """Serve `metrics` (plus the driver process's own `process_*` figures) at `http://host:port/metrics` from a
    daemon thread; returns the server (`server_port`, `shutdown()`).

    Raises:
        ConfigError: the address cannot be bound.
    """
    from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    ProcessCollector(registry=registry)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"metrics.port={port}: cannot listen on {host}:{port} ({exc.strerror or exc})"
        ) from exc
    return server
