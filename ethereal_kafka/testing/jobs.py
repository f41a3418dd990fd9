"""Run a job file inside the test process, on a SparkSession shared by every job of the test session.

A subprocess `ethereal-kafka run` pays 10-20 s of JVM and Spark start-up; a job run here pays only its queries'
start (the session, its JVM and its warm Python workers are reused). Use it for every test that checks what a job
writes or how it behaves; keep subprocess runs for what needs a separate process (SIGKILL, signals, a CLI's exit
code and output).

    def test_my_job(run_job, kafka_cluster, topic_factory, tmp_path):
        ...write job.properties...
        result = run_job(tmp_path / "job.properties")     # --available-now by default; raises when the job failed
        assert read_committed(kafka_cluster.bootstrap, out_topic) == ...

What differs from `ethereal-kafka run` (and why it does not matter to what a test checks):

- The job's Spark settings (its `spark.*` keys, `sink.tasks` as shuffle partitions, the state store) are set on
  the shared session for the run and put back afterwards; a static setting (e.g. `spark.master`,
  `spark.driver.memory`) cannot change in a running session, and a job naming one is refused: run it as a
  subprocess.
- `env`: environment variables for the job's Python workers (fault injection, for instance) reach them through
  the SparkContext's `environment`, which Spark hands to the Python functions it creates while the job's queries
  are built (such functions get workers of their own); the driver-side `os.environ` is set for the run as well.
- `env` is in force while the job file is read too, so `${VAR}` placeholders in the job and connector files take
  the test's values (topics, bootstrap address, checkpoint folder).
- A pipeline module beside the job file (`my_jobs/orders.py` next to `job.properties`, as `ethereal-kafka run`
  finds it) is imported by the driver from there, and the job's Python workers get that folder on their
  `PYTHONPATH` through `env` as well (only when it is not on it already: a new `PYTHONPATH` costs the run a fresh
  Python worker daemon).
- Signal handlers are not installed; `timeout_s` forces a stop instead (and the run then fails).
- The shared session's Spark log (log4j) goes to the run's log folder for the run, as `run`'s does: a test that
  expects a failure sees the job's one-line error, not Spark's `ERROR TaskSetManager` lines.
- The app is let go when the run ends (its run lock and owner claim), as a stopping `ethereal-kafka run` does, so a
  later run or `ethereal-kafka replay` in the same test is not refused by the test process itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ethereal_kafka.errors import EtherealKafkaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ethereal_kafka.runtime.lifecycle import StopReport

log = logging.getLogger(__name__)

#: How long a run may take before the runner forces it to stop (and reports a failure).
DEFAULT_TIMEOUT_S = 300.0


class InProcessRunError(EtherealKafkaError):
    """A job run in-process failed or timed out; the message is the job's one-line error (or the timeout)."""


@dataclass(frozen=True)
class JobRun:
    """The outcome of one in-process run.

    Attributes:
        app_id: The job's app.id.
        report: How the run stopped (None when it failed).
        error: The job's error (None when it succeeded): what `ethereal-kafka run` prints as `error: ...`.
        seconds: Wall time of the run.
    """

    app_id: str
    report: StopReport | None
    error: EtherealKafkaError | None
    seconds: float

    @property
    def ok(self) -> bool:
        """True when the run ended without an error."""
        return self.error is None


def run_in_process(
    spark: SparkSession,
    job_path: str | Path,
    *,
    available_now: bool = True,
    env: Mapping[str, str] | None = None,
    log_dir: str | Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    check: bool = True,
    stop: threading.Event | None = None,
) -> JobRun:
    """Run the job file on `spark` until its input is consumed (`available_now`), `stop` is set, or `timeout_s`
    passes.

    Args:
        spark: The shared session (the `spark` fixture's); it keeps running afterwards.
        env: Environment variables for the run (driver and the job's Python workers), in force while the job
            file is read as well (its `${VAR}` placeholders take them).
        log_dir: The run's log folder (default: as `ethereal-kafka run`).
        check: Raise `InProcessRunError` when the run failed (else return the error in `JobRun.error`).
        stop: Set by another thread to stop the run gracefully, as a first SIGTERM would (for a run started in a
            thread without `available_now`).

    Raises:
        InProcessRunError: with `check`, the run failed or timed out.
        ConfigError: the job file is invalid, or names a static Spark setting (run it as a subprocess).
    """
    from ethereal_kafka.config.job import load_job
    from ethereal_kafka.runtime.lifecycle import JobLifecycle
    from ethereal_kafka.runtime.logs import default_log_dir, route_spark_logs
    from ethereal_kafka.runtime.runner import close_clients, execute, job_spark_conf

    with _environment(spark, env or {}, driver_only=True):
        loaded = load_job(job_path)
    job = loaded.job
    env = {**(env or {}), **_workers_path(job_path, job.pipeline, env or {})}
    logs = Path(log_dir) if log_dir else default_log_dir(job.app_id)
    route_spark_logs(
        spark, logs
    )  # as `run` does: Spark's lines (a failed task's ERROR TaskSetManager) go there
    lifecycle = JobLifecycle(
        job.shutdown_timeout_ms / 1000,
        log_hint=f" (full trace under {logs})",
        stall_timeout_s=job.epoch_stall_timeout_ms / 1000,
    )
    lifecycle.stop_when_drained = available_now
    began = time.monotonic()
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        lifecycle.request_stop("timeout")
        lifecycle.request_stop("timeout")  # the second request forces the stop

    watchdog = threading.Timer(timeout_s, expire)
    watchdog.daemon = True
    finished = threading.Event()

    def watch_stop(event: threading.Event) -> None:
        while not finished.is_set():
            if event.wait(0.2):
                lifecycle.request_stop("stop")
                return

    if stop is not None:
        threading.Thread(target=watch_stop, args=(stop,), name="in-process-stop", daemon=True).start()
    report: StopReport | None = None
    error: EtherealKafkaError | None = None
    with _session_conf(spark, job_spark_conf(loaded)), _environment(spark, env or {}):
        watchdog.start()
        try:
            report = execute(spark, loaded, lifecycle, available_now=available_now)
        except EtherealKafkaError as exc:
            error = exc
        finally:
            finished.set()
            watchdog.cancel()
            _stop_queries_of(spark, job.app_id)
            close_clients()
    if timed_out.is_set() and error is None:
        error = InProcessRunError(f"job {job.app_id} did not finish within {timeout_s:.0f}s")
    run = JobRun(job.app_id, report, error, time.monotonic() - began)
    log.info("in-process run of %s: %s in %.1fs", job.app_id, "ok" if run.ok else error, run.seconds)
    if check and error is not None:
        raise InProcessRunError(f"job {job.app_id} failed: {error}") from error
    return run


@contextlib.contextmanager
def _session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Set `conf` on the session for the `with` block, then put the previous values back."""
    from ethereal_kafka.errors import ConfigError

    previous: dict[str, str | None] = {}
    try:
        for key, value in conf.items():
            old = spark.conf.get(key, None)
            if old == value:
                continue
            if not _changes_in_session(spark, key) and key.startswith("spark.") and old is not None:
                raise ConfigError(
                    f"{key}={value}: a static Spark setting cannot change in the shared test session "
                    f"(it is {old}); run this job as a subprocess"
                )
            previous[key] = old
            spark.conf.set(key, value)
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _workers_path(job_path: str | Path, pipeline: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """`{"PYTHONPATH": ...}` putting the job file's folder first when the pipeline's top-level module sits there and
    the workers would not find it otherwise; else `{}`."""
    if pipeline is None:
        return {}
    folder = Path(job_path).resolve().parent
    top = pipeline.partition(":")[0].split(".")[0]
    if not ((folder / top).is_dir() or (folder / f"{top}.py").is_file()):
        return {}
    current = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    paths = [p for p in current.split(os.pathsep) if p]
    if str(folder) in paths:
        return {}
    return {"PYTHONPATH": os.pathsep.join([str(folder), *paths])}


@contextlib.contextmanager
def _environment(spark: SparkSession, env: Mapping[str, str], driver_only: bool = False) -> Iterator[None]:
    """Give the job's Python workers (unless `driver_only`) and this process `env` for the `with` block."""
    if not env:
        yield
        return
    context_env: dict[str, str] = {} if driver_only else spark.sparkContext.environment
    saved_context = {k: context_env.get(k) for k in env}
    saved_os = {k: os.environ.get(k) for k in env}
    context_env.update(env)
    os.environ.update(env)
    try:
        yield
    finally:
        for store, saved in ((context_env, saved_context), (os.environ, saved_os)):
            for key, old in saved.items():
                if old is None:
                    store.pop(key, None)
                else:
                    store[key] = old


def _stop_queries_of(spark: SparkSession, app_id: str) -> None:
    """Stop any query of `app_id` still active (a failed or timed-out run leaves none behind)."""
    for query in spark.streams.active:
        if (query.name or "").startswith(f"{app_id}-"):
            with contextlib.suppress(Exception):
                query.stop()


def _changes_in_session(spark: SparkSession, key: str) -> bool:
    """Whether setting `key` on a running session reaches the queries started after it: a modifiable SQL setting,
    or a `spark.sql.*` one Spark reads by prefix and does not register (RocksDB's
    `spark.sql.streaming.stateStore.rocksdb.*`: not "modifiable" to `isModifiable`, yet a stateful query takes its
    state stores' settings from the session's when it starts), unless it is a static SQL setting."""
    if spark.conf.isModifiable(key):
        return True
    if not key.startswith("spark.sql."):
        return False
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return not bool(jvm.org.apache.spark.sql.internal.SQLConf.isStaticConfigKey(key))
