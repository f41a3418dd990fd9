"""`ethereal-kafka run JOB.properties`: run a job under the checkpoint coordinator until it is told to stop.

Lifecycle: load and validate the job; start Spark (embedded `local[2]` unless the job or `spark-submit` says
otherwise); build the sources and the pipeline's queries (`runtime.pipeline`); let the coordinator check recovery and
fence the transactional id pool; start the queries. SIGTERM/SIGINT stop the queries (an epoch in
flight is aborted by its transactions, never half-committed) and the process exits 0; a fatal error exits 1 with a
one-line reason.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ethereal_kafka.checkpoint.coordinator import CheckpointCoordinator, CoordinatorSettings, QuerySinks
from ethereal_kafka.checkpoint.history import HistoryLog
from ethereal_kafka.checkpoint.spark_log import has_progress
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.config.job import LoadedJob, load_job
from ethereal_kafka.runtime.job import RunningJob
from ethereal_kafka.runtime.pipeline import build_queries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def job_sources(loaded: LoadedJob, fresh: bool) -> dict[str, KafkaSourceConfig]:
    """The job's sources as they run: group.id defaults to app.id, initial offsets pinned in the checkpoint, and
    `replay.from` applied when the checkpoint is fresh."""
    out = {}
    for name, conf in loaded.sources.items():
        changes: dict[str, object] = {"checkpoint_location": f"{loaded.job.checkpoint_location}/sources"}
        if conf.group_id is None:
            changes["group_id"] = loaded.job.app_id
        if fresh and loaded.job.replay_from:
            changes["starting_offsets"] = loaded.job.replay_from
        out[name] = dataclasses.replace(conf, **changes)  # type: ignore[arg-type]
    return out


def checkpoint_has_progress(root: str) -> bool:
    """True when any query under the job's checkpoint folder has logged an epoch."""
    folder = Path(root)
    return folder.is_dir() and any(
        child.is_dir() and child.name != "sources" and has_progress(child) for child in folder.iterdir()
    )


def start(
    spark: SparkSession, loaded: LoadedJob, available_now: bool = False
) -> tuple[RunningJob, CheckpointCoordinator]:
    """Build the job's queries under a coordinator and start them."""
    job = loaded.job
    fresh = not checkpoint_has_progress(job.checkpoint_location)
    sources = job_sources(loaded, fresh)
    builds = build_queries(spark, loaded, sources)
    history = HistoryLog(job.app_id)
    coordinator = CheckpointCoordinator(
        CoordinatorSettings(
            app_id=job.app_id,
            guarantee=job.delivery_guarantee,
            checkpoint_root=job.checkpoint_location,
            sink_tasks=job.sink_tasks,
            transaction_timeout_ms=job.transaction_timeout_ms,
            epoch_interval_ms=job.trigger_interval_ms,
            min_pause_ms=job.min_pause_between_epochs_ms,
        ),
        sources,
        loaded.sinks,
        history,
    )
    coordinator.prepare(
        [QuerySinks(b.name, b.sinks, b.mode, b.stateful) for b in builds],
        replaying=fresh and job.replay_from is not None,
    )
    queries = {}
    for build in builds:
        writer = (
            build.frame.writeStream.foreachBatch(coordinator.writer(build.name))
            .queryName(f"{job.app_id}-{build.name}")
            .option("checkpointLocation", coordinator.location(build.name))
            .outputMode(build.output_mode)
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{job.trigger_interval_ms} milliseconds")
        queries[build.name] = writer.start()
    return RunningJob(queries), coordinator


def run(job_path: str | Path, available_now: bool = False) -> int:
    """Run a job file until stopped (or until the input is consumed with `available_now`); returns the exit code."""
    from ethereal_kafka.runtime.spark import local_session

    loaded = load_job(job_path)
    spark = local_session(
        f"ethereal-kafka-{loaded.job.app_id}",
        master=loaded.job.spark_master,
        conf={
            **{f"spark.{k}": v for k, v in loaded.job.passthrough.items()},
            "spark.sql.shuffle.partitions": str(loaded.job.sink_tasks),
        },
    )
    stopping = threading.Event()
    running, _ = start(spark, loaded, available_now)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.set()
        running.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        running.await_termination()
    except Exception:
        if stopping.is_set():
            return 0
        raise
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(sys.argv[1], available_now="--available-now" in sys.argv))
