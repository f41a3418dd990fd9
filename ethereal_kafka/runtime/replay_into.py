"""`ethereal-kafka replay APP --from ... --into TOPIC`: run a job's pipeline once over a range of its input, into
another topic, without touching the app.

The pipeline runs under a throwaway app id `{app}.replay-<UTC time>` (its own transactional ids, consumer group,
progress topic and owner claim) with a temporary Spark checkpoint, from the replay positions up to the end offsets
at start (`availableNow`), writing every sink's rows to TOPIC with the job's delivery guarantee. The app's own
group, markers, checkpoint, sink topics and dead-letter topics are never written: a job with a dead-letter topic
(a source's `dlq.topic`, `user.error.dlq.topic`) names one for the replay's dead letters (`--dlq-into`), else the
replay is refused (its dead letters would repeat in production's). Afterwards the temporary checkpoint, the throwaway
app's local state, progress topic and groups are removed (best effort: a leftover is named in the outcome).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ethereal_kafka.checkpoint.apps import app_dir
from ethereal_kafka.checkpoint.errors import ReplayError
from ethereal_kafka.checkpoint.history import HistoryError, HistoryLog
from ethereal_kafka.config.job import LoadedJob
from ethereal_kafka.connectors.kafka.clients import admin_client, cluster_metadata
from ethereal_kafka.eos.committed import progress_queries
from ethereal_kafka.eos.names import owner_group, progress_group, progress_topic
from ethereal_kafka.errors import EtherealKafkaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class IntoOutcome:
    """What a replay into a topic did.

    Attributes:
        replay_app_id: The throwaway app id it ran under.
        records: Records committed to the topic (from the run's epoch history; -1 when unknown).
        epochs: Epochs committed.
        leftovers: Clean-up steps that failed (one line each); the replay's output is complete regardless.
    """

    replay_app_id: str
    topic: str
    records: int
    epochs: int
    leftovers: tuple[str, ...]


def dead_letter_topics(loaded: LoadedJob) -> tuple[str, ...]:
    """The job's dead-letter topics: its sources' `dlq.topic` and its `user.error.dlq.topic`, sorted."""
    found = {conf.dlq_topic for conf in loaded.sources.values() if conf.dlq_topic}
    if loaded.job.user_error_dlq_topic:
        found.add(loaded.job.user_error_dlq_topic)
    return tuple(sorted(found))


def into_job(
    loaded: LoadedJob,
    starts: Mapping[str, str],
    topic: str,
    replay_app_id: str,
    root: Path,
    dlq_topic: str | None = None,
) -> LoadedJob:
    """`loaded` rewritten for a replay into `topic`: new app id and checkpoint, every source in the throwaway
    app's group starting at `starts[name]`, every sink writing `topic`, every dead letter (a source's, a user
    function's) going to `dlq_topic`; `replay.from` dropped.

    Raises:
        ReplayError: see `check_targets`.
    """
    check_targets(loaded, topic, dlq_topic)
    job = dataclasses.replace(
        loaded.job,
        app_id=replay_app_id,
        checkpoint_location=str(root),
        replay_from=None,
        user_error_dlq_topic=dlq_topic if loaded.job.user_error_dlq_topic else None,
    )
    sources = {
        name: dataclasses.replace(
            conf,
            group_id=replay_app_id,
            starting_offsets=starts[name],
            dlq_topic=dlq_topic if conf.dlq_topic else None,
        )
        for name, conf in loaded.sources.items()
    }
    sinks = {name: dataclasses.replace(conf, topic=topic) for name, conf in loaded.sinks.items()}
    return LoadedJob(loaded.path, job, sources, sinks, loaded.tables, loaded.files)


def check_targets(loaded: LoadedJob, topic: str, dlq_topic: str | None) -> None:
    """Refuse a replay of `loaded` into `topic`, with its dead letters into `dlq_topic`, that would write the job's
    own topics or lose track of dead letters.

    Raises:
        ReplayError: `topic` or `dlq_topic` is one of the job's input, output or dead-letter topics (a loop, or
            duplicates in production's), both are the same topic, the job has a dead-letter topic and `dlq_topic`
            is None, or it has none and `dlq_topic` is given.
    """
    dead = dead_letter_topics(loaded)
    _not_the_jobs("--into", topic, loaded, dead)
    if dead and dlq_topic is None:
        raise ReplayError(
            f"app {loaded.job.app_id} sends dead letters to {', '.join(dead)}; a replay into {topic} would add "
            "its own to them: name a topic for the replay's dead letters with --dlq-into TOPIC"
        )
    if not dead and dlq_topic is not None:
        raise ReplayError(
            f"--dlq-into {dlq_topic}: app {loaded.job.app_id} has no dead-letter topic; leave --dlq-into out"
        )
    if dlq_topic is not None:
        _not_the_jobs("--dlq-into", dlq_topic, loaded, dead)
    if dlq_topic == topic:
        raise ReplayError(f"--dlq-into {dlq_topic}: the same topic as --into; name another topic")


def _not_the_jobs(flag: str, topic: str, loaded: LoadedJob, dead: tuple[str, ...]) -> None:
    """Refuse `topic` (given as `flag`) when it is one of the job's input, output or dead-letter topics."""
    role = _role(loaded, topic, dead)
    if role is not None:
        raise ReplayError(f"{flag} {topic}: that is {role} of app {loaded.job.app_id}; name another topic")


def _role(loaded: LoadedJob, topic: str, dead: tuple[str, ...]) -> str | None:
    """What `topic` is to the job ("an input topic", ...), or None when it is none of its topics."""
    if any(
        topic in s.topics or (s.topic_pattern is not None and re.fullmatch(s.topic_pattern, topic))
        for s in loaded.sources.values()
    ):
        return "an input topic"
    if any(s.topic == topic for s in loaded.sinks.values()):
        return "an output topic"
    if topic in dead:
        return "a dead-letter topic"
    return None


def replay_into(
    loaded: LoadedJob, starts: Mapping[str, str], topic: str, dlq_topic: str | None = None
) -> IntoOutcome:
    """Run `loaded`'s pipeline over `[starts, end now)` into `topic` and return when it is all committed.

    Args:
        loaded: The job as its file defines it.
        starts: Per source name, the start positions (`ReplayPlan.starts()`).
        topic: The target topic; it must exist (its partition count decides the output partitioning).
        dlq_topic: The topic for the replay's dead letters; it must exist, and be given when the job has a
            dead-letter topic (`check_targets`).

    Raises:
        ReplayError: `topic` or `dlq_topic` does not exist, or is refused by `check_targets`.
        EtherealKafkaError: whatever a run of the job raises (configuration, Kafka, Spark).
    """
    sink = next(iter(loaded.sinks.values()))
    admin = admin_client(sink.bootstrap_servers, sink.passthrough)
    check_targets(loaded, topic, dlq_topic)  # before the broker is asked
    replay_app = f"{loaded.job.app_id}.replay-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    existing = cluster_metadata(admin, sink.bootstrap_servers).topics
    for flag, target in (("--into", topic), ("--dlq-into", dlq_topic)):
        if target is not None and target not in existing:
            raise ReplayError(f"{flag} {target}: no such topic on {sink.bootstrap_servers}; create it first")
    with tempfile.TemporaryDirectory(prefix="ethereal-kafka-replay-") as tmp:
        job = into_job(loaded, starts, topic, replay_app, Path(tmp) / "checkpoint", dlq_topic)
        run_once(job)
    records, epochs = committed_totals(replay_app)
    return IntoOutcome(replay_app, topic, records, epochs, clean_up(job))


def run_once(job: LoadedJob, spark: SparkSession | None = None) -> None:
    """Run a throwaway app's job `availableNow` to the end of its input, on `spark` when given (left running), else
    on a session of its own (stopped after); the app's run lock and claim are let go when it ends.

    Raises:
        EtherealKafkaError: whatever a run of the job raises (configuration, Kafka, Spark).
    """
    from ethereal_kafka.runtime.runner import start
    from ethereal_kafka.runtime.spark import local_session

    session = spark or local_session(
        f"ethereal-kafka-{job.job.app_id}",
        master=job.job.spark_master,
        conf={
            **{f"spark.{k}": v for k, v in job.job.passthrough.items()},
            "spark.sql.shuffle.partitions": str(job.job.sink_tasks),
        },
    )
    try:
        running, _ = start(session, job, available_now=True)
        try:
            running.await_termination()
        finally:
            running.stop()
    finally:
        if spark is None:
            session.stop()


def committed_totals(app_id: str) -> tuple[int, int]:
    """Records and epochs a finished throwaway app committed, from its history ((-1, 0) when it has none)."""
    try:
        done = [r for r in HistoryLog(app_id).records() if r.outcome == "committed"]
    except HistoryError:
        return -1, 0
    return sum(r.records_out for r in done), len(done)


def clean_up(job: LoadedJob) -> tuple[str, ...]:
    """Remove what the throwaway app left; returns one line per failure (never raises: the output is complete)."""
    app_id = job.job.app_id
    sink = next(iter(job.sinks.values()))
    admin = admin_client(sink.bootstrap_servers, sink.passthrough)
    leftovers: list[str] = []
    topic = progress_topic(app_id)
    try:
        queries = progress_queries(app_id, sink.bootstrap_servers, sink.passthrough)
    except EtherealKafkaError as exc:
        queries = []
        leftovers.append(f"progress groups {topic}.* not listed, so not deleted: {exc}")
    groups = [app_id, owner_group(app_id), *(progress_group(app_id, q) for q in queries)]
    for what, futures in (
        ("topic", admin.delete_topics([topic], operation_timeout=30)),
        ("group", admin.delete_consumer_groups(groups, request_timeout=30)),
    ):
        for name, future in futures.items():
            try:
                future.result()
            except Exception as exc:  # KafkaException: a group never created, or the broker refused
                if "NOT_FOUND" not in str(exc) and "UNKNOWN" not in str(exc):
                    leftovers.append(f"{what} {name} not deleted: {exc}")
    shutil.rmtree(app_dir(app_id), ignore_errors=True)
    return tuple(leftovers)
