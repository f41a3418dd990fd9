"""`ethereal-kafka shadow JOB --from-savepoint PATH --until now|OFFSETS --into SUFFIX`: run a version of an app over
input production already processed, into topics of its own, for `ethereal-kafka diff` to compare.

The range comes from production's history (`checkpoint.shadows.production_range`): from the savepoint up to a
committed epoch of production. The version in JOB then runs once over exactly that input, as a restore of the
savepoint would run it (each operator's state seeded by uid, the watermark carried), under its own app id
`{app}.shadow-{suffix}` (its own transactional ids, consumer group, progress topic and owner claim) and a temporary
checkpoint, with every source bounded at the range's end (`ending.offsets`) and every sink and dead-letter topic `T`
(the sources' and `user.error.dlq.topic`) written as `T.{suffix}`; a sink whose rows name their topic is refused,
as nothing could keep them off production's topics. Production's offsets, markers, checkpoint and topics are never written. The shadow topics are
created with their production topics' partition counts; one that exists must be empty. Afterwards the shadow app's
groups, progress topic and local state are removed (a leftover is named) and the run is kept as a `ShadowRecord`.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ethereal_kafka.checkpoint.history import HistoryError, HistoryLog
from ethereal_kafka.checkpoint.savepoints import read_manifest
from ethereal_kafka.checkpoint.shadows import (
    OutputRange,
    Partitions,
    ProductionRange,
    ShadowError,
    ShadowRecord,
    as_json,
    production_range,
    write_record,
)
from ethereal_kafka.config.job import LoadedJob
from ethereal_kafka.connectors.kafka.errors import TopicError
from ethereal_kafka.connectors.kafka.topic_admin import create_topic, describe_topic
from ethereal_kafka.eos.replay import ReplayStart, apply_replay, plan_replay
from ethereal_kafka.runtime.replay_into import clean_up, committed_totals, dead_letter_topics, run_once

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_SUFFIX = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$")


def shadow_topic(topic: str, suffix: str) -> str:
    """The topic a shadow named `suffix` writes instead of `topic`."""
    return f"{topic}.{suffix}"


def shadow_app_id(app_id: str, suffix: str) -> str:
    """The app id a shadow named `suffix` of `app_id` runs under."""
    return f"{app_id}.shadow-{suffix}"


def shadow_job(loaded: LoadedJob, suffix: str, root: Path, ends: Partitions) -> LoadedJob:
    """`loaded` rewritten for a shadow run: its own app id and checkpoint `root`, every source in the shadow's group
    and bounded at `ends`, every sink and dead-letter topic renamed by `shadow_topic`; `replay.from` dropped."""
    app = shadow_app_id(loaded.job.app_id, suffix)
    dead = loaded.job.user_error_dlq_topic
    job = dataclasses.replace(
        loaded.job,
        app_id=app,
        checkpoint_location=str(root),
        replay_from=None,
        user_error_dlq_topic=shadow_topic(dead, suffix) if dead else None,
    )
    sources = {}
    for name, conf in loaded.sources.items():
        bound = ",".join(f"{t}:{p}:{o}" for (t, p), o in sorted(ends.items()) if conf.reads(t))
        changes: dict[str, object] = {"group_id": app, "ending_offsets": bound}
        if conf.dlq_topic:
            changes["dlq_topic"] = shadow_topic(conf.dlq_topic, suffix)
        sources[name] = dataclasses.replace(conf, **changes)  # type: ignore[arg-type]
    sinks = {
        name: dataclasses.replace(conf, topic=shadow_topic(str(conf.topic), suffix))
        for name, conf in loaded.sinks.items()
    }
    return LoadedJob(loaded.path, job, sources, sinks, loaded.tables, loaded.files)


def run_shadow(
    loaded: LoadedJob,
    savepoint: Path,
    until: Partitions | None,
    suffix: str,
    allow_non_restored: bool = False,
    spark: SparkSession | None = None,
) -> ShadowRecord:
    """Run the version `loaded` over production's range from `savepoint` up to `until` (None: production's newest
    committed epochs) into topics named by `suffix`; returns the kept record (see the module docstring). On
    `spark` when given (left running), else on a session of its own, stopped after.

    Raises:
        ShadowError: a bad suffix, the range cannot be found (`production_range`), a shadow topic holds records, or a
            sink's production topic does not exist.
        SavepointError: the savepoint is not whole.
        EtherealKafkaError: whatever a run of the job raises (configuration, Kafka, Spark), or a refused restore.
    """
    from ethereal_kafka.runtime.runner import job_sources

    if not _SUFFIX.match(suffix):
        raise ShadowError(f"--into {suffix!r}: a shadow's name takes letters, digits, '.', '_' and '-'")
    routed = sorted(name for name, conf in loaded.sinks.items() if not conf.topic)
    if routed:
        raise ShadowError(
            f"sink {routed[0]} of {loaded.path} writes to the topics its rows name: a shadow could not keep them "
            "off production's topics; give the sink a topic"
        )
    app_id = loaded.job.app_id
    folder = savepoint.absolute()
    manifest = read_manifest(folder)
    try:
        history = HistoryLog(app_id).records()
    except HistoryError as exc:
        raise ShadowError(
            f"app {app_id}: its checkpoint history is not here ({exc}); shadow on the host that runs it"
        ) from exc
    found = production_range(app_id, history, manifest, until)
    outputs = _shadow_topics(loaded, found, suffix)
    app = shadow_app_id(app_id, suffix)
    with tempfile.TemporaryDirectory(prefix="ethereal-kafka-shadow-") as tmp:
        root = Path(tmp) / "checkpoint"
        job = shadow_job(loaded, suffix, root, found.input_ends)
        sources = job_sources(job, fresh=False)
        begin = dataclasses.replace(
            ReplayStart.parse(f"savepoint:{folder}"), allow_non_restored=allow_non_restored
        )
        sink = next(iter(job.sinks.values()))
        try:
            apply_replay(
                plan_replay(app, sources, begin, stable=False),
                sources,
                str(root),
                sink.bootstrap_servers,
                sink.passthrough,
            )
            run_once(job, spark)
            records, _ = committed_totals(app)
        finally:
            leftovers = clean_up(job)  # a failed shadow leaves no group, progress topic or local state either
    written = {conf.topic for conf in loaded.sinks.values() if conf.topic}
    record = ShadowRecord(
        app_id=app_id,
        suffix=suffix,
        shadow_app_id=app,
        savepoint=str(folder),
        job_file=str(loaded.path),
        input_starts=as_json(found.input_starts),
        input_ends=as_json(found.input_ends),
        epochs=dict(found.epochs),
        outputs=outputs,
        shadow_records=records,
        created_ms=int(time.time() * 1000),
        extra_topics=tuple(sorted(shadow_topic(t, suffix) for t in written - set(found.output_ends))),
    )
    write_record(record)
    for line in leftovers:
        print(f"warning: {line}")
    return record


def _shadow_topics(loaded: LoadedJob, found: ProductionRange, suffix: str) -> tuple[OutputRange, ...]:
    """Create (or check empty) the shadow topic of every topic the version or production writes; returns the
    production ranges to compare.

    Raises:
        ShadowError: a shadow topic holds records, or a topic the version writes does not exist in production.
    """
    sink = next(iter(loaded.sinks.values()))
    bootstrap, settings = sink.bootstrap_servers, sink.passthrough
    topics = {conf.topic for conf in loaded.sinks.values() if conf.topic}
    topics |= set(dead_letter_topics(loaded))
    topics |= set(found.output_ends)
    for topic in sorted(topics):
        target = shadow_topic(topic, suffix)
        try:
            have = describe_topic(bootstrap, target, settings)
        except TopicError:
            have = None
        if have is not None:
            if any(p.end > p.earliest for p in have.partitions):
                raise ShadowError(
                    f"shadow topic {target} at {bootstrap} holds records; name another shadow (--into) or delete it"
                )
            continue
        try:
            production = describe_topic(bootstrap, topic, settings)
        except TopicError as exc:
            raise ShadowError(
                f"{topic}: the version writes a topic that does not exist; create it first"
            ) from exc
        create_topic(
            bootstrap,
            target,
            len(production.partitions),
            production.replication_factor,
            settings=settings,
            if_not_exists=True,
        )
    return tuple(
        OutputRange(
            topic,
            shadow_topic(topic, suffix),
            found.output_starts[topic],
            found.output_ends[topic],
            tuple(found.writers[topic]),
        )
        for topic in sorted(found.output_ends)
    )
