"""`ethereal-kafka run JOB.properties`: run a job under the checkpoint coordinator until it is told to stop.

Lifecycle: load and validate the job; start Spark (embedded `local[2]` unless the job or `spark-submit` says
otherwise); build the sources and the pipeline's queries (`runtime.pipeline`); let the coordinator check recovery and
fence the transactional id pool; start the queries. SIGTERM/SIGINT stop the job between epochs: no new epoch
starts, the epoch in flight commits (or, past `shutdown.timeout.ms` or on a second signal, is interrupted and aborted
by the next start's fencing), then the queries and Spark stop and the process exits 0 (`runtime.lifecycle`). A fatal
error exits 1 with a one-line reason; the full trace is in the run's log folder (`runtime.logs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ethereal_kafka.checkpoint.apps import record_run
from ethereal_kafka.checkpoint.history import HistoryLog
from ethereal_kafka.checkpoint.savepoints import read_manifest
from ethereal_kafka.checkpoint.spark_log import has_progress
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.config.job import JobConfig, LoadedJob, load_job
from ethereal_kafka.connectors.event_time import last_committed, mark_replay, maxima_behind, prepare_carry
from ethereal_kafka.connectors.kafka.clients import LOG_DIR_ENV, close_cached_clients
from ethereal_kafka.eos.coordinator import CheckpointCoordinator
from ethereal_kafka.eos.epoch_writer import EpochWriter
from ethereal_kafka.eos.ownership import InstanceGuard
from ethereal_kafka.eos.replay import ReplayIntent, intent_savepoint, take_replay_intent
from ethereal_kafka.errors import EtherealKafkaError, SparkSetupError
from ethereal_kafka.plan.query import Query
from ethereal_kafka.runtime.admission import EpochSizer
from ethereal_kafka.runtime.autoscaler import open_autoscaler
from ethereal_kafka.runtime.description import ResumableRecorder, RunDescription, write_description
from ethereal_kafka.runtime.errors import JobFailedError
from ethereal_kafka.runtime.event_time import CarryEventTime
from ethereal_kafka.runtime.failure import root_cause
from ethereal_kafka.runtime.imports import export_to_workers
from ethereal_kafka.runtime.job import RunningJob
from ethereal_kafka.runtime.lifecycle import JobLifecycle, StopReport
from ethereal_kafka.runtime.logs import (
    JVM_OUTPUT_FILE,
    child_output_to,
    configure_python_logging,
    default_log_dir,
    route_spark_logs,
    spark_log_options,
)
from ethereal_kafka.runtime.metrics import JobMetrics
from ethereal_kafka.runtime.operator_counter import OperatorCounter
from ethereal_kafka.runtime.pipeline import build_pipeline
from ethereal_kafka.runtime.planners import planner_release
from ethereal_kafka.runtime.preflight import require_preflight
from ethereal_kafka.runtime.restarts import RestartTracker
from ethereal_kafka.runtime.run_metrics import RunMetrics, open_metrics
from ethereal_kafka.runtime.savepoint import (
    HoldRelease,
    check_restore,
    held_sources,
    hold_for_event_time,
    initial_states,
)
from ethereal_kafka.runtime.source_bounds import bounded_source

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from ethereal_kafka.api.environment import StreamExecutionEnvironment

    GraphBuilder = Callable[[StreamExecutionEnvironment], None]

log = logging.getLogger(__name__)


class RunObserver(Protocol):
    """Watches a run from before its first epoch (the web UI, `ethereal_kafka.ui.live`)."""

    def watch(self, coordinator: CheckpointCoordinator, description: RunDescription) -> None:
        """Called by `start` once the coordinator is prepared and before any query starts: from here on every
        epoch outcome reaches the coordinator's epoch listeners."""


def job_sources(
    loaded: LoadedJob, fresh: bool, replay: ReplayIntent | None = None
) -> dict[str, KafkaSourceConfig]:
    """The job's sources as they run: group.id defaults to app.id, initial offsets pinned in the checkpoint, epochs
    bounded and dead letters committed with their epoch under exactly-once, sized within those bounds with
    `epoch.sizing=adaptive` (`runtime.source_bounds.bounded_source`), and,
    when the checkpoint is fresh, the start positions `ethereal-kafka replay` left (`replay`: per source, and per
    consumer group of a source whose queries start apart) or else `replay.from` applied."""
    out = {}
    for name, conf in loaded.sources.items():
        changes: dict[str, object] = {"checkpoint_location": f"{loaded.job.checkpoint_location}/sources"}
        if conf.group_id is None:
            changes["group_id"] = loaded.job.app_id
        changes.update(bounded_source(loaded.job, dataclasses.replace(conf, **changes)))  # type: ignore[arg-type]
        if fresh and replay is not None and name in replay.starts:
            changes["starting_offsets"] = replay.starts[name]
            if name in replay.group_starts:
                changes["group_starting_offsets"] = json.dumps(
                    dict(replay.group_starts[name]), sort_keys=True
                )
        elif fresh and loaded.job.replay_from:
            changes["starting_offsets"] = loaded.job.replay_from
        out[name] = dataclasses.replace(conf, **changes)  # type: ignore[arg-type]
    return out


def checkpoint_has_progress(root: str) -> bool:
    """True when any query under the job's checkpoint folder has logged an epoch."""
    return any(has_progress(query) for query in _query_checkpoints(root))


def checkpoint_has_commits(root: str) -> bool:
    """True when any query under the job's checkpoint folder has committed an epoch."""
    return any(last_committed(query) is not None for query in _query_checkpoints(root))


def _query_checkpoints(root: str) -> list[Path]:
    """The queries' Spark checkpoint folders under the job's checkpoint root (none when it does not exist)."""
    folder = Path(root)
    if not folder.is_dir():
        return []
    return [child for child in folder.iterdir() if child.is_dir() and child.name != "sources"]


def start(
    spark: SparkSession,
    loaded: LoadedJob,
    available_now: bool = False,
    graph_builder: GraphBuilder | None = None,
    metrics: RunMetrics | None = None,
    observers: Sequence[RunObserver] = (),
    log_dir: str | Path | None = None,
    guard: InstanceGuard | None = None,
) -> tuple[RunningJob, CheckpointCoordinator]:
    """Build the job's queries under a coordinator and start them (`graph_builder`: see `build_queries`; `metrics`
    and `observers` watch the coordinator from before the first epoch). The run's description (its plan and
    masked configuration, `runtime.description`) is recorded for the app and handed to the observers; the
    returned job carries it too (`log_dir`: the run's log folder, shown with it). With adaptive epoch sizing the
    epoch sizer posts each source's first budget before the queries start; with an `autoscale.policy` the
    autoscaler places the executors before and evaluates once they run (`RunningJob.close()` stops it).

    `guard` is this instance's hold on the app (`eos.ownership`), acquired by the caller; without one the
    job takes the app itself (refusing when another instance runs it) and lets it go when the job is stopped.

    Raises:
        AppRunningError: (without `guard`) another instance runs the app.
    """
    own = guard is None
    if guard is None:
        guard = own_app(loaded)
    try:
        return _start(spark, loaded, guard, own, available_now, graph_builder, metrics, observers, log_dir)
    except BaseException:
        if own:
            guard.release()
        raise


def own_app(loaded: LoadedJob, takeover: bool = False) -> InstanceGuard:
    """Take the app for a new instance of this job (`InstanceGuard.acquire`) and return its guard.

    Raises:
        AppRunningError: another instance runs the app (and `takeover` was not asked for, or it did not hand over).
    """
    import uuid

    sink = next(iter(loaded.sinks.values()))
    job = loaded.job
    guard = InstanceGuard(
        job.app_id,
        sink.bootstrap_servers,
        sink.passthrough,
        uuid.uuid4().hex[:16],
        takeover=takeover,
        wait_s=job.shutdown_timeout_ms / 1000 + 60,
    )
    guard.acquire()
    return guard


def _start(
    spark: SparkSession,
    loaded: LoadedJob,
    guard: InstanceGuard,
    own: bool,
    available_now: bool,
    graph_builder: GraphBuilder | None,
    metrics: RunMetrics | None,
    observers: Sequence[RunObserver],
    log_dir: str | Path | None,
) -> tuple[RunningJob, CheckpointCoordinator]:
    job = loaded.job
    fresh = not checkpoint_has_progress(job.checkpoint_location)
    # A replay leaves its start positions in the checkpoint root; they apply while the checkpoint is fresh.
    # A restore's state goes into the plan until an epoch commits: a replayed epoch 0 needs it as the first did.
    restoring = not checkpoint_has_commits(job.checkpoint_location)
    restore = intent_savepoint(job.checkpoint_location, job.app_id) if restoring else None
    replay = take_replay_intent(job.checkpoint_location, job.app_id, fresh)
    sources = job_sources(loaded, fresh, replay)
    restored: set[str] = set()
    if restore is None:
        pipeline = build_pipeline(spark, loaded, sources, graph_builder)
    else:
        folder = Path(restore[0])
        manifest = read_manifest(folder)
        states = initial_states(folder, manifest)
        pipeline = build_pipeline(spark, loaded, sources, graph_builder, states, restored)
        check_restore(folder, manifest, restored, pipeline.plan, restore[1])
        log.info("app %s: restoring %s from savepoint %s", job.app_id, ", ".join(sorted(restored)), folder)
    builds = pipeline.queries
    if restore is not None:
        hold_for_event_time(manifest, builds, job)
    holds = held_sources(builds, job)
    if (
        fresh
    ):  # a query a restore has no start for (a source its queries read apart), refused before it starts
        for build in builds:
            for config in build.sources:
                config.starting_offsets_of_group()
    for build in builds:  # before anything is claimed or recorded: a refused version changes nothing
        if build.carried_event_time:
            prepare_carry(job.query_checkpoint(build.name), {n: k for n, k, _ in build.carried_event_time})
    history = HistoryLog(job.app_id)
    coordinator = CheckpointCoordinator(job, sources, loaded.sinks, history, claims=guard.writer)
    groups: dict[str, list[str]] = {}
    for build in builds:
        for config in build.sources or tuple(sources.values()):
            groups.setdefault(config.name, []).append(config.group)
    # Before the claim: `replay` must know every local claim (and every group the queries commit to).
    record_run(loaded, coordinator.instance_id, groups)
    coordinator.prepare(builds, replaying=fresh and (job.replay_from is not None or replay is not None))
    record_run(loaded, coordinator.instance_id, groups, coordinator.pool_by_cluster())
    bookkeeping = metrics.metrics if metrics is not None else None
    if metrics is not None:
        metrics.watch(
            coordinator, side_outputs=[sink for b in builds for sink in b.late_sinks], plan=pipeline.plan
        )
    context = spark.sparkContext
    description = RunDescription.of(
        loaded, pipeline.plan, context.master or "", context.uiWebUrl, log_dir, sources=sources
    )
    try:
        write_description(description)
    except OSError as exc:  # for people only: the run goes on without it
        log.warning("could not record the run's description: %s", exc)
    coordinator.epoch_annotators.append(run_stamp(description.started_ms))
    coordinator.epoch_listeners.append(ResumableRecorder(description))
    if holds:
        coordinator.epoch_listeners.append(HoldRelease(holds))
    if bookkeeping is not None:
        coordinator.epoch_annotators.append(OperatorCounter(spark, job.app_id, pipeline.plan, bookkeeping))
    for observer in observers:
        observer.watch(coordinator, description)
    EpochSizer(job, bookkeeping.set_epoch_budget if bookkeeping is not None else None).watch(coordinator)
    coordinator.epoch_begin_listeners.append(planner_release(build.name for build in builds))
    autoscaler = open_autoscaler(spark, job, bookkeeping, coordinator.gate)
    queries = {}
    for build in builds:
        write: Any = EpochWriter(coordinator, build.name)
        if build.carried_event_time:
            behind = maxima_behind(coordinator.location(build.name))
            if behind is not None:
                log.warning(behind)
            mark_replay(coordinator.location(build.name))
            write = CarryEventTime(
                write,
                spark,
                f"{job.app_id}-{build.name}",
                coordinator.location(build.name),
                build.carried_event_time,
            )
        writer = (
            pipeline.frames[build.name]
            .writeStream.foreachBatch(write)
            .queryName(f"{job.app_id}-{build.name}")
            .option("checkpointLocation", coordinator.location(build.name))
            .outputMode(build.output_mode)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{job.trigger_interval_ms} milliseconds")
        # A query reads these settings when it starts (its checkpoint keeps them): set them for this start only.
        settings = query_start_conf(job, build)
        previous = {key: spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            spark.conf.set(key, value)
        queries[build.name] = writer.start()
        for key, old in previous.items():
            spark.conf.unset(key) if old is None else spark.conf.set(key, old)
        if len(builds) > 1:
            wait_initialized(queries[build.name])
    if autoscaler is not None:
        autoscaler.start()
    return RunningJob(
        queries,
        description,
        release=guard.release if own else None,
        autoscaler=autoscaler,
        gate=coordinator.gate,
    ), coordinator


def run_stamp(started_ms: int) -> Callable[..., dict[str, Any]]:
    """An epoch annotator marking every epoch attempt of this run with the run's start (`EpochRecord.
    run_started_ms`): the history then tells runs apart, and where the app stopped and started again."""

    def stamp(_query: str, _record: Any, _tasks: Any) -> dict[str, Any]:
        return {"run_started_ms": started_ms}

    return stamp


def wait_initialized(query: StreamingQuery, timeout_s: float = 120.0) -> None:
    """Wait until `query` has initialized its sources (or stopped, or `timeout_s` passed).

    Spark 4.3's Python streaming source registers itself in state shared by every query of the session while its
    query initializes; a task of another query serialized at that moment fails (`OptionalDataException`). Starting
    a job's queries one after the other avoids the race.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and query.isActive:
        if not str(query.status.get("message", "")).startswith("Initializing"):
            return
        time.sleep(0.1)


def query_start_conf(job: JobConfig, build: Query) -> dict[str, str]:
    """The session settings `build` starts with: its own (`Query.spark_conf`) and, under `state.backend=auto`, the
    state store the plan gave a stateful query (`Query.state_store`). Spark records the store in the query's
    checkpoint at its first start and keeps the recorded one on every restart, so a checkpoint keeps its store."""
    from ethereal_kafka.runtime.spark import STATE_STORE_KEY, STATE_STORE_PROVIDERS

    settings = dict(build.spark_conf)
    if job.state_backend == "auto" and build.stateful:
        settings[STATE_STORE_KEY] = STATE_STORE_PROVIDERS[build.state_store]
        log.info("query %s: %s state store (state.backend=auto)", build.name, build.state_store)
    return settings


def job_spark_conf(loaded: LoadedJob) -> dict[str, str]:
    """The Spark settings a job runs with: its `spark.*` pass-through keys, its sink tasks as shuffle partitions,
    and the state store of its `state.backend` (RocksDB for `auto`, which `query_start_conf` refines per query)."""
    from ethereal_kafka.runtime.spark import STATE_STORE_KEY, STATE_STORE_PROVIDERS

    job = loaded.job
    return {
        **{f"spark.{k}": v for k, v in job.passthrough.items()},
        "spark.sql.shuffle.partitions": str(job.sink_tasks),
        STATE_STORE_KEY: STATE_STORE_PROVIDERS[
            "rocksdb" if job.state_backend == "auto" else job.state_backend
        ],
    }


def execute(
    spark: SparkSession,
    loaded: LoadedJob,
    lifecycle: JobLifecycle,
    available_now: bool = False,
    graph_builder: GraphBuilder | None = None,
    log_dir: str | Path | None = None,
    guard: InstanceGuard | None = None,
) -> StopReport:
    """Run `loaded` on `spark` under `lifecycle` until it stops; the session is left running.

    Called by `run` (which owns the session) and by the test kit's in-process runner (which shares one session
    between jobs). `guard` is this instance's hold on the app, taken before Spark started (`own_app`); without one
    it is taken here. The job's metrics are closed and the app is let go before it returns; its queries have
    stopped. While it runs, a `run --takeover` elsewhere stops it between epochs (the report says so).

    After a failed epoch the job's restart strategy (`restart.strategy`, `runtime.restarts`) may restart the
    queries from their checkpoint on the same session, each restart logged and counted in the metrics; the run
    fails when the strategy gives up.

    Raises:
        AppRunningError: (without `guard`) another instance runs the app.
        EtherealKafkaError: the coordinator refused to start or a query failed (`JobFailedError`, after the
            restarts the strategy allowed); one line.
    """
    job = loaded.job
    metrics = RunMetrics()
    ui: Any = None
    running: RunningJob | None = None
    coordinator: CheckpointCoordinator | None = None
    guard = guard or own_app(loaded)
    restarts = RestartTracker(job.restart_policy)
    try:
        log.info("job %s starting on %s", job.app_id, spark.sparkContext.master)
        metrics = open_metrics(spark, loaded)
        ui = open_ui(loaded, metrics)
        observers = [ui] if ui is not None else []
        while True:
            running, coordinator = start(
                spark, loaded, available_now, graph_builder, metrics, observers, log_dir=log_dir, guard=guard
            )
            lifecycle.attach(running, coordinator.gate)
            if not restarts.restarts:
                guard.watch(lifecycle.request_stop)
                metrics.start_progress()
                log.info("job %s running: queries %s", job.app_id, ", ".join(running.queries))
                if spark.sparkContext.uiWebUrl:  # `spark.ui.enabled=true` (docs/operations.md)
                    log.info("Spark UI at %s", spark.sparkContext.uiWebUrl)
            try:
                report = lifecycle.wait()
                break
            except JobFailedError as exc:
                running.close()
                coordinator.close()
                running = coordinator = None
                _restart_or_raise(exc, restarts, lifecycle, metrics, guard)
        if guard.taken_over_by is not None:
            report = dataclasses.replace(report, taken_over_by=guard.taken_over_by)
        if metrics.metrics is not None:
            for query in running.queries.values():
                observe_last_progress(metrics.metrics, query)
            report = dataclasses.replace(report, summary=metrics.metrics.summary())
        return report
    except EtherealKafkaError:
        log.debug("job %s failed", job.app_id, exc_info=True)
        raise
    except Exception as exc:
        log.debug("job %s failed", job.app_id, exc_info=True)
        raise JobFailedError(f"job {job.app_id} failed: {root_cause(exc)}{lifecycle.log_hint}") from exc
    finally:
        if running is not None:
            running.close()
        if ui is not None:
            ui.close()
        metrics.close()
        if coordinator is not None:
            coordinator.close()
        guard.release()


def _restart_or_raise(
    failure: JobFailedError,
    restarts: RestartTracker,
    lifecycle: JobLifecycle,
    metrics: RunMetrics,
    guard: InstanceGuard,
) -> None:
    """After a failed epoch: return once the queries may start again (the restart policy allows it and its delay
    passed), else raise the failure (with how many restarts came before).

    Raises:
        JobFailedError: the policy gives up, a stop was asked for, or the app was taken over.
    """
    text = "\n".join(str(e) for e in (failure, failure.__cause__) if e is not None)
    decision = restarts.decide(text)
    stopped = lifecycle.stop_requested or guard.taken_over_by is not None
    if not decision.restart or stopped:
        if restarts.restarts:
            line, hint = str(failure), lifecycle.log_hint
            if hint and line.endswith(hint):
                line = line[: -len(hint)]
            raise JobFailedError(
                f"{line} [gave up after {restarts.restarts} restart(s): {decision.reason}]{hint}"
            ) from failure
        raise failure
    log.warning(
        "%s; restarting the queries from the checkpoint in %.1fs (%s, %s)",
        failure,
        decision.delay_s,
        decision.reason,
        restarts.policy.describe(),
    )
    if metrics.metrics is not None:
        metrics.metrics.operators.count_restart(restarts.policy.strategy)
    if lifecycle.sleep(decision.delay_s):
        raise failure  # a stop came during the delay: the run ends failed, as it would have without a policy


def run(
    job_path: str | Path,
    available_now: bool = False,
    graph_builder: GraphBuilder | None = None,
    log_dir: str | Path | None = None,
    takeover: bool = False,
) -> int:
    """Run a job file until stopped (or until the input is consumed with `available_now`); returns the exit code.

    Called by `ethereal-kafka run` (also under spark-submit) in the main thread. SIGTERM/SIGINT stop the job
    between epochs (`runtime.lifecycle`) and 0 is returned; the last log line says how it stopped. Logs go to stderr
    (short) and to `log_dir` (full; default `runtime.logs.default_log_dir`).

    One instance runs an app at a time: another running instance makes this one refuse before Spark starts, unless
    `takeover` asks that instance to stop between epochs and hand over (`eos.ownership`).

    Before Spark starts, the job passes the checks `validate` makes (`runtime.preflight`), and the job file's folder
    is put on the path the driver and Spark's Python workers import the pipeline module from (`runtime.imports`).

    Raises:
        EtherealKafkaError: the job file is invalid or fails a pre-flight check, another instance runs the app (`AppRunningError`), the
            coordinator refuses to start (`ConfigError`, `RecoveryError`, ...), or a query failed
            (`JobFailedError`); each message is one line.
    """
    loaded = load_job(job_path)
    job = loaded.job
    logs = Path(log_dir) if log_dir else default_log_dir(job.app_id)
    configure_python_logging(logs)  # first: librdkafka's lines of the checks below go to the log file too
    # A mistake costs a second here, not a Spark start (a graph_builder replaces the job's pipeline); a missing
    # topic or a cluster that does not answer, at most `connect.timeout.ms`.
    require_preflight(
        loaded, pipeline=graph_builder is None, connect=True, timeout_s=job.connect_timeout_ms / 1000
    )
    run_loaded(loaded, logs, available_now, graph_builder, takeover)
    return 0


def run_loaded(
    loaded: LoadedJob,
    logs: Path,
    available_now: bool = False,
    graph_builder: GraphBuilder | None = None,
    takeover: bool = False,
) -> StopReport:
    """`run` after its checks: take the app, start the job's own Spark session (its JVM's output and log4j lines
    in `logs`, not on the terminal), run the job under a lifecycle with signal handlers (in the main thread), stop
    Spark, and log the run's summary and how it stopped; returns how it stopped.

    Called by `run` and by the demo (`ethereal-kafka demo`), each having configured Python logging for `logs`
    (`runtime.logs.configure_python_logging`).

    Raises:
        EtherealKafkaError: as `run` (each message one line).
    """
    from ethereal_kafka.runtime.jvm import OPTIONS_KEY
    from ethereal_kafka.runtime.spark import launched_by_spark_submit, local_session
    from ethereal_kafka.runtime.worker_daemon import PANDAS_ENV

    job = loaded.job
    lifecycle = JobLifecycle(
        job.shutdown_timeout_ms / 1000,
        log_hint=f" (full trace under {logs})",
        stall_timeout_s=job.epoch_stall_timeout_ms / 1000,
    )
    lifecycle.stop_when_drained = available_now
    # Before Spark starts (and before the signal handlers): a refusal costs a second, not a session.
    guard = own_app(loaded, takeover)
    lifecycle.install_signal_handlers()
    export_to_workers(loaded.path)  # before the JVM starts: its Python workers import the pipeline module too
    # No user code in a transform.sql job's Python workers: pandas stays out of them. Only the driver JVM this run
    # starts inherits the setting (`_launch_environment`), not a later session or child of this process.
    launch_env = {PANDAS_ENV: "0"} if job.transform_sql is not None else {}
    conf = job_spark_conf(loaded)
    if not launched_by_spark_submit():  # the driver JVM logs to the folder from its first line
        conf[OPTIONS_KEY] = f"{conf.get(OPTIONS_KEY, '')} {spark_log_options(logs)}".strip()
        os.environ[LOG_DIR_ENV] = str(logs)  # and its local Python workers' librdkafka lines go there too
    try:
        if launched_by_spark_submit():  # spark-submit's JVM is this process's parent: its output is its own
            spark = local_session(f"ethereal-kafka-{job.app_id}", master=job.spark_master, conf=conf)
        else:
            with child_output_to(logs / JVM_OUTPUT_FILE) as jvm_output, _launch_environment(launch_env):
                try:
                    spark = local_session(f"ethereal-kafka-{job.app_id}", master=job.spark_master, conf=conf)
                except SparkSetupError as exc:
                    raise SparkSetupError(f"{exc} (the JVM's output: {jvm_output})") from exc
        lifecycle.install_signal_handlers()  # again: PySpark replaced our SIGINT handler as the context started
        try:
            if not launched_by_spark_submit():
                route_spark_logs(spark, logs)
            log.info("job %s logs: %s", job.app_id, logs)
            report = execute(
                spark, loaded, lifecycle, available_now, graph_builder, log_dir=logs, guard=guard
            )
        finally:
            stop_session(spark)
    finally:
        guard.release()
        lifecycle.restore_signal_handlers()
    if report.summary is not None:
        for line in report.summary.lines():
            log.info("%s", line)
    log.info("%s", report.line())
    return report


@contextlib.contextmanager
def _launch_environment(values: Mapping[str, str]) -> Iterator[None]:
    """`values` in this process's environment while the driver JVM starts (the JVM, and the Python workers it
    forks later, keep the copy it started with), each variable the user set left as it is; restored after."""
    added = {name: value for name, value in values.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def observe_last_progress(metrics: JobMetrics, query: StreamingQuery) -> None:
    """Hand `query`'s last progress report (`lastProgress`, as JSON) to `metrics`: the listener delivers reports
    asynchronously, so the run's summary reads the final watermark and state size here. Never raises."""
    try:
        progress = query.lastProgress
        if progress is not None:
            text = getattr(progress, "json", None)
            metrics.observe_progress(json.loads(text) if isinstance(text, str) else progress)
    except Exception:  # for people only: the summary keeps the listener's figures
        log.debug("last progress of %s not read", query.name, exc_info=True)


#: The entry-point group the live web UI registers in (`pyproject.toml`: `ethereal_kafka.ui.live:LiveUi.serve`).
UI_GROUP = "ethereal_kafka.ui"


def open_ui(loaded: LoadedJob, metrics: RunMetrics) -> Any:
    """The hook to the web UI: serve it on `ui.host`:`ui.port` when `ui.enabled`; returns the UI (a `RunObserver`
    with `close()`) or None. The UI is a layer above the runtime (it reads the runtime's metrics), so the runner
    finds it by its registration (the package entry point `ethereal_kafka.ui` / `live`), not an import.

    Raises:
        ConfigError: the UI cannot listen on its address.
        EtherealKafkaError: no UI is registered (the package is not installed: `pip install -e .`).
    """
    from importlib.metadata import entry_points

    job = loaded.job
    if not job.ui_enabled or metrics.metrics is None:
        return None
    found = entry_points(group=UI_GROUP, name="live")
    if not found:
        raise EtherealKafkaError(
            f"no live web UI is registered (entry point group {UI_GROUP}): install the package (pip install -e .), "
            "or set ui.enabled=false"
        )
    return next(iter(found)).load()(metrics.metrics, job.ui_host, job.ui_port)


def stop_session(spark: SparkSession) -> None:
    """Stop Spark, then close the Kafka clients this process cached (no consumer keeps polling a broker that is
    going away). Never raises: the job's outcome is already decided."""
    try:
        spark.stop()
    except Exception:
        log.warning("stopping Spark failed", exc_info=True)
    close_clients()


def close_clients() -> None:
    """Close the Kafka clients this process cached for its jobs (the driver's coordinator and source clients)."""
    close_cached_clients()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(sys.argv[1], available_now="--available-now" in sys.argv))
