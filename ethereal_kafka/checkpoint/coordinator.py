"""The checkpoint coordinator (driver side): start-up fencing and recovery checks, and each epoch's write.

`prepare()` runs once before the queries start: it checks that the job can resume safely, creates the progress
topic, claims the app for this instance, checks the transaction timeout against the broker, and runs
`init_transactions` over the whole transactional id pool (fencing zombies and aborting their open transactions).

`EpochWriter` is the `foreachBatch` function of one query (which writes one sink, or several in one transaction per
task). For epoch N it reads N's end offsets from Spark's offset log, plans the sink tasks, runs them (phase one, `txn_task`), then for shuffling jobs commits the input end offsets to the
job's consumer group (phase two) and records the epoch in the history. Only when it returns does Spark write its
commit log, so Kafka is never behind Spark.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic

from ethereal_kafka.checkpoint.errors import RecoveryError
from ethereal_kafka.checkpoint.gate import EpochGate
from ethereal_kafka.checkpoint.layout import WriteLayout, check_layout, read_layout, record_layout
from ethereal_kafka.checkpoint.ownership import describe, read_claim, write_claim
from ethereal_kafka.checkpoint.spark_log import (
    CheckpointLogError,
    checkpoint_id,
    epoch_end_offsets,
    epoch_watermark_ms,
    has_progress,
)
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.connectors.kafka.clients import (
    admin_client,
    cluster_metadata,
    group_consumer,
    transactional_producer,
    with_retries,
)
from ethereal_kafka.connectors.kafka.epoch_bounds import check_bounds_fit
from ethereal_kafka.connectors.kafka.epoch_write import (
    SINK_INDEX_COLUMN,
    EpochWrite,
    TaskSlot,
    progress_topic,
    transactional_id,
)
from ethereal_kafka.connectors.kafka.errors import FencedError
from ethereal_kafka.connectors.kafka.markers import EpochMarker, OwnerClaim
from ethereal_kafka.connectors.kafka.positions import PositionResolver
from ethereal_kafka.connectors.kafka.sink import KafkaSink, check_columns, check_same_cluster
from ethereal_kafka.connectors.kafka.source import initial_offsets_file
from ethereal_kafka.connectors.kafka.transactional import RESULT_SCHEMA, write_task
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.plan.classify import PARTITION_PRESERVING, SHUFFLING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ethereal_kafka.checkpoint.history import EpochRecord, HistoryLog

log = logging.getLogger(__name__)

#: Errors that mean another instance fenced this one's producer.
_FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
AT_MOST_ONCE = "at-most-once"


@dataclass(frozen=True)
class CoordinatorSettings:
    """How the coordinator runs one job.

    Attributes:
        checkpoint_root: The job's checkpoint folder; query `q` uses `<root>/<q>`.
        sink_tasks: Sink tasks (and progress partitions) of shuffling jobs; fixed for the job's life.
        transaction_timeout_ms: Producer transaction timeout; must be >= the epoch interval and <= the broker's
            `transaction.max.timeout.ms`.
        epoch_interval_ms: The trigger interval (checked against the timeout).
        min_pause_ms: Least time between the end of one epoch's write and the start of the next (Flink's
            minimum pause between checkpoints): lets a slow job make progress between commits.
    """

    app_id: str
    guarantee: str
    checkpoint_root: str
    sink_tasks: int = 2
    transaction_timeout_ms: int = 60000
    epoch_interval_ms: int = 1000
    min_pause_ms: int = 0


@dataclass(frozen=True)
class SinkShape:
    """The classified query feeding one sink (a query writing exactly that sink)."""

    mode: str
    stateful: bool


@dataclass(frozen=True)
class QuerySinks:
    """One streaming query as the coordinator sees it: its name, the sinks it writes, and its classification.

    Attributes:
        name: Names the query's Spark checkpoint folder, transactional ids and progress group; fixed for the
            job's life (a query writing one sink is named after it).
        sinks: The sink connectors, in the order rows index them (`__sink`) when there are several; each
            connector's `key.column`/`value.column` name its columns.
        sources: The source connectors the query reads, as it reads them (several queries of one job reading one
            topic each use their own consumer group); empty = every source of the job.
    """

    name: str
    sinks: tuple[KafkaSinkConfig, ...]
    mode: str
    stateful: bool
    sources: tuple[KafkaSourceConfig, ...] = ()


class CheckpointCoordinator:
    """Owns the exactly-once protocol for one job run (one instance per app.id at a time)."""

    def __init__(
        self,
        settings: CoordinatorSettings,
        sources: Mapping[str, KafkaSourceConfig],
        sinks: Mapping[str, KafkaSinkConfig],
        history: HistoryLog | None = None,
        owner: OwnerClaim | None = None,
    ) -> None:
        self.settings = settings
        self.sources = dict(sources)
        self.sinks = dict(sinks)
        #: The claim this instance commits at start (`checkpoint.ownership`); its id marks the instance's epochs.
        self.owner = owner or OwnerClaim(uuid.uuid4().hex[:16])
        self.instance_id = self.owner.instance_id
        self._phase_two: dict[str, Producer] = {}
        self.shapes: dict[str, QuerySinks] = {}
        self._partitions: dict[str, int | None] = {}
        self.history = history
        #: Asked `(query, record, the sink tasks' summary rows)` before each epoch outcome is recorded; each returns
        #: `EpochRecord` fields to add (the metrics' per-epoch latency and lag) or None.
        self.epoch_annotators: list[Callable[[str, EpochRecord, list[Any]], Mapping[str, Any] | None]] = []
        #: Told `(query, record, the sink tasks' summary rows)` after each epoch outcome is recorded (the web UI).
        self.epoch_listeners: list[Callable[[str, EpochRecord, list[Any]], None]] = []
        #: Every writer's epochs pass through it; the runner closes it to stop between epochs.
        self.gate = EpochGate()
        first = next(iter(self.sinks.values()))
        self.bootstrap = first.bootstrap_servers
        self.passthrough = first.passthrough

    # -- start-up ------------------------------------------------------------------------------------------------
    def location(self, query: str) -> str:
        """The Spark checkpoint folder of `query`."""
        return f"{self.settings.checkpoint_root.rstrip('/')}/{query}"

    def prepare(self, shapes: Mapping[str, SinkShape] | list[QuerySinks], replaying: bool = False) -> None:
        """Check recovery, create the progress topic, claim the app, check timeouts, fence the id pool.

        Args:
            shapes: The job's queries; or, per sink name, the classified query writing only that sink.
            replaying: The sources were told to start from an explicit position (a deliberate replay).

        Raises:
            RecoveryError: a stateful job lost its Spark checkpoint (and is not replaying).
            ConfigError: the transaction timeout does not fit the epoch interval or the broker's maximum.
        """
        if isinstance(shapes, list):
            queries = shapes
        else:
            queries = [QuerySinks(n, (self.sinks[n],), s.mode, s.stateful) for n, s in shapes.items()]
        for query in queries:
            check_same_cluster(query.sinks)
        self.shapes = {q.name: q for q in queries}
        for name, shape in self.shapes.items():
            if shape.stateful and not replaying and not has_progress(self.location(name)):
                self._refuse_if_ran_before(name)
        self._check_transaction_timeout()
        self._check_layouts()
        self._ensure_progress_topic()
        self._claim()
        if self.settings.guarantee == EXACTLY_ONCE:
            self._fence_pool()

    def _check_layouts(self) -> None:
        """Record each shuffling query's write layout at its first start; refuse a start with another one
        (`checkpoint.layout`). Raises ConfigError."""
        if self.settings.guarantee != EXACTLY_ONCE:
            return
        for name, shape in self.shapes.items():
            if shape.mode != SHUFFLING or "://" in self.settings.checkpoint_root:
                continue
            current = WriteLayout(
                self.settings.sink_tasks, {s.name: self.output_partitions(s.name) for s in shape.sinks}
            )
            recorded = read_layout(self.location(name))
            if recorded is None:
                record_layout(self.location(name), current)
            else:
                check_layout(name, recorded, current)

    def query_sources(self, query: str) -> list[KafkaSourceConfig]:
        """The sources `query` reads (its own configs when it has them, else every source of the job)."""
        shape = self.shapes.get(query)
        return list(shape.sources) if shape is not None and shape.sources else list(self.sources.values())

    def _refuse_if_ran_before(self, sink: str) -> None:
        for source in self.query_sources(sink):
            resolver = PositionResolver(source)
            try:
                tps = resolver.topic_partitions()
                consumer = group_consumer(source.bootstrap_servers, source.group, source.passthrough)
                query = [TopicPartition(t, p) for t, p in tps]
                found = with_retries(
                    f"committed offsets of group {source.group}",
                    source.bootstrap_servers,
                    lambda c=consumer, q=query: c.committed(q, timeout=30),  # type: ignore[misc]
                )
            finally:
                resolver.close()
            for tp in found:
                marker = EpochMarker.parse(tp.metadata)
                if marker is not None and marker.app_id == self.settings.app_id:
                    raise RecoveryError(
                        f"stateful job {self.settings.app_id}: its Spark checkpoint {self.location(sink)} is gone but "
                        f"group {source.group} holds offsets committed at epoch {marker.epoch} of checkpoint "
                        f"{marker.checkpoint_id}; the operator state is lost. Restore the checkpoint, or replay from "
                        f"an explicit position (`ethereal-kafka replay {self.settings.app_id} --from ...`, or "
                        "`replay.from=earliest|timestamp:<ms>|topic:partition:offset,...` in the job file)."
                    )

    def _check_transaction_timeout(self) -> None:
        timeout = self.settings.transaction_timeout_ms
        if self.settings.guarantee != EXACTLY_ONCE:
            return
        if timeout < self.settings.epoch_interval_ms:
            raise ConfigError(
                f"transaction.timeout.ms={timeout} is shorter than the epoch interval {self.settings.epoch_interval_ms}"
            )
        check_bounds_fit(self.sources.values(), timeout, self.settings.epoch_interval_ms)
        admin = admin_client(self.bootstrap, self.passthrough)
        brokers = cluster_metadata(admin, self.bootstrap).brokers
        resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
        described = with_retries(
            "broker config query",
            self.bootstrap,
            lambda: admin.describe_configs([resource])[resource].result(timeout=30),
        )
        entry = described.get("transaction.max.timeout.ms")
        maximum = int(entry.value) if entry is not None and entry.value else 900000
        if timeout > maximum:
            raise ConfigError(
                f"transaction.timeout.ms={timeout} exceeds the broker's transaction.max.timeout.ms={maximum}"
            )

    def _ensure_progress_topic(self) -> None:
        topic = progress_topic(self.settings.app_id)
        admin = admin_client(self.bootstrap, self.passthrough)
        existing = cluster_metadata(admin, self.bootstrap).topics.get(topic)
        if existing is None:
            futures = admin.create_topics(
                [NewTopic(topic, max(1, self.settings.sink_tasks), 1, config={"cleanup.policy": "compact"})]
            )
            try:
                futures[topic].result(timeout=30)
            except Exception as exc:  # created concurrently by another instance: fine
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
        elif len(existing.partitions) < self.settings.sink_tasks:
            raise ConfigError(
                f"progress topic {topic} has {len(existing.partitions)} partitions but the job has "
                f"{self.settings.sink_tasks} sink tasks: sink tasks are fixed for a job's life"
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = cluster_metadata(admin, self.bootstrap).topics.get(topic)
            if found is not None and found.error is None and found.partitions:
                return
            time.sleep(0.1)

    def _claim(self) -> None:
        write_claim(self.settings.app_id, self.bootstrap, self.passthrough, self.owner)

    def check_owner(self) -> None:
        """Raise FencedError when the claim names another instance than this one."""
        found = read_claim(self.settings.app_id, self.bootstrap, self.passthrough)
        if found is not None and found[0].instance_id != self.instance_id:
            raise FencedError(
                f"app {self.settings.app_id}: another instance ({describe(*found)}) took over; this one "
                f"({self.instance_id}) stops"
            )

    def pool(self) -> list[str]:
        """Every transactional id this job may use: its sink tasks' and its phase-two commits'."""
        return [txn_id for txn_id, _ in self._pool()]

    def _pool(self) -> list[tuple[str, KafkaSourceConfig | None]]:
        """`(transactional id, the source whose cluster it lives on, None = the sinks' cluster)`."""
        ids: list[tuple[str, KafkaSourceConfig | None]] = []
        for query, shape in self.shapes.items():
            if shape.mode == PARTITION_PRESERVING:
                (source,) = self.query_sources(query)
                resolver = PositionResolver(source)
                try:
                    tps = resolver.topic_partitions()
                finally:
                    resolver.close()
                ids += [(transactional_id(self.settings.app_id, query, f"{t}-{p}"), None) for t, p in tps]
            else:
                ids += [
                    (transactional_id(self.settings.app_id, query, str(p)), None)
                    for p in range(self.settings.sink_tasks)
                ]
                ids += [(self._phase_two_id(query, source), source) for source in self.query_sources(query)]
        return ids

    def _phase_two_id(self, query: str, source: KafkaSourceConfig) -> str:
        return transactional_id(self.settings.app_id, query, f"phase2-{source.name}")

    def _fence_pool(self) -> None:
        """`init_transactions` over the whole pool, in parallel: older holders are fenced and their open
        transactions aborted. The phase-two producers are kept: this instance commits its epochs with them, and a
        later instance's fencing makes an old one's phase two fail instead of moving offsets backwards."""
        from concurrent.futures import ThreadPoolExecutor

        def fence(entry: tuple[str, KafkaSourceConfig | None]) -> tuple[str, Producer]:
            txn_id, source = entry
            bootstrap = source.bootstrap_servers if source is not None else self.bootstrap
            passthrough = source.passthrough if source is not None else self.passthrough
            return txn_id, transactional_producer(
                txn_id, bootstrap, self.settings.transaction_timeout_ms, passthrough
            )

        pool = self._pool()
        with ThreadPoolExecutor(max_workers=min(8, max(1, len(pool)))) as workers:
            fenced = dict(workers.map(fence, pool))
        phase_two = {txn_id for txn_id, source in pool if source is not None}
        for txn_id, producer in fenced.items():
            if txn_id in phase_two:
                self._phase_two[txn_id] = producer
            else:
                producer.flush(0)

    def output_partitions(self, sink: str) -> int | None:
        """Partition count of `sink`'s fixed topic (None when rows name their topic), looked up once."""
        if sink not in self._partitions:
            topic = self.sinks[sink].topic
            count = None
            if topic:
                found = cluster_metadata(
                    admin_client(self.bootstrap, self.passthrough), self.bootstrap
                ).topics.get(topic)
                count = len(found.partitions) if found is not None and found.partitions else None
            self._partitions[sink] = count
        return self._partitions[sink]

    def close(self) -> None:
        """End of the run: close the checkpoint history (its writer stays open while epochs are recorded) and let
        the phase-two producers go."""
        if self.history is not None:
            self.history.close()
        producers, self._phase_two = list(self._phase_two.values()), {}
        for producer in producers:
            with contextlib.suppress(KafkaException):
                producer.flush(0)

    # -- epochs --------------------------------------------------------------------------------------------------
    def writer(self, query: str) -> EpochWriter:
        """The `foreachBatch` function of `query`."""
        return EpochWriter(self, query)

    def commit_source_offsets(
        self, ends: list[dict[str, dict[str, int]]], checkpoint: str, epoch: int, query: str | None = None
    ) -> None:
        """Commit epoch end offsets to the group of each source `query` reads, with the epoch marker as metadata
        (phase two). Under exactly-once each source's offsets are committed in a transaction of the query's
        phase-two producer (fenced by any later instance's start, so a taken-over instance cannot move them
        backwards); otherwise with a plain offset commit.

        Raises:
            FencedError: another instance fenced this one's phase-two producer.
            KafkaConnectionError: the commit did not succeed within bounded retries.
        """
        marker = EpochMarker(self.settings.app_id, checkpoint, epoch).render()
        candidates = self.query_sources(query) if query is not None else list(self.sources.values())
        for offsets in ends:
            for source in [s for s in candidates if any(self._reads(s, t) for t in offsets)]:
                tps = [
                    TopicPartition(t, int(p), int(o), marker)
                    for t, parts in offsets.items()
                    if self._reads(source, t)
                    for p, o in parts.items()
                ]
                if not tps:
                    continue
                consumer = group_consumer(source.bootstrap_servers, source.group, source.passthrough)
                producer = self._phase_two.get(self._phase_two_id(query, source)) if query else None
                if producer is not None:
                    self._commit_in_transaction(producer, consumer, tps, source)
                    continue
                with_retries(
                    f"offset commit for group {source.group}",
                    source.bootstrap_servers,
                    lambda c=consumer, o=tps: c.commit(offsets=o, asynchronous=False),  # type: ignore[misc]
                )

    def offsets_committed(
        self, ends: list[dict[str, dict[str, int]]], checkpoint: str, epoch: int, query: str
    ) -> bool:
        """True when a source group of `query` holds a marker proving `epoch` of this checkpoint committed its
        offsets (an at-most-once epoch being replayed)."""
        for source in self.query_sources(query):
            tps = [
                TopicPartition(t, int(p))
                for offsets in ends
                for t, parts in offsets.items()
                if self._reads(source, t)
                for p in parts
            ]
            if not tps:
                continue
            consumer = group_consumer(source.bootstrap_servers, source.group, source.passthrough)
            found = with_retries(
                f"committed offsets of group {source.group}",
                source.bootstrap_servers,
                lambda c=consumer, q=tps: c.committed(q, timeout=30),  # type: ignore[misc]
            )
            for tp in found:
                marker = EpochMarker.parse(tp.metadata)
                if marker is not None and marker.covers(self.settings.app_id, checkpoint, epoch):
                    return True
        return False

    def _commit_in_transaction(
        self, producer: Producer, consumer: Any, tps: list[TopicPartition], source: KafkaSourceConfig
    ) -> None:
        def commit() -> None:
            producer.begin_transaction()
            try:
                producer.send_offsets_to_transaction(tps, consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is not None and (error.fatal() or error.code() in _FENCED_CODES):
                    raise FencedError(
                        f"app {self.settings.app_id}: another instance took over (the phase-two commit for group "
                        f"{source.group} was fenced); this one ({self.instance_id}) stops"
                    ) from exc
                with contextlib.suppress(KafkaException):
                    producer.abort_transaction(30)
                raise

        with_retries(f"offset commit for group {source.group}", source.bootstrap_servers, commit, attempts=8)

    @staticmethod
    def _reads(source: KafkaSourceConfig, topic: str) -> bool:
        return source.reads(topic)

    def record(self, entry: EpochRecord, query: str = "", tasks: Sequence[Any] = ()) -> None:
        """Let `epoch_annotators` add their figures to an epoch outcome, append it to the checkpoint history (when
        one is attached), then tell `epoch_listeners`.

        The annotators, the history and the listeners are for people; their failures are logged and never fail an
        epoch.
        """
        import dataclasses

        from ethereal_kafka.checkpoint.history import HistoryError

        rows = list(tasks)
        for annotate in self.epoch_annotators:
            try:
                extra = annotate(query, entry, rows)
                if extra:
                    entry = dataclasses.replace(entry, **extra)
            except Exception:
                log.exception("epoch annotator failed on epoch %s of %s", entry.epoch, query)
        if self.history is not None:
            try:
                self.history.record(entry)
            except HistoryError as exc:
                log.warning("epoch %s not recorded in the history: %s", entry.epoch, exc)
        for listener in self.epoch_listeners:
            try:
                listener(query, entry, rows)
            except Exception:
                log.exception("epoch listener failed on epoch %s of %s", entry.epoch, query)


class EpochWriter:
    """`foreachBatch` function of one query under the coordinator (any delivery guarantee)."""

    def __init__(self, coordinator: CheckpointCoordinator, query: str) -> None:
        self.coordinator = coordinator
        self.sink = query
        self.shape = coordinator.shapes[query]
        self.config = self.shape.sinks[0]
        self.plain = KafkaSink(self.shape.sinks)
        self._last_end = 0.0
        self._task_rows: list[Any] = []  # the current epoch's sink task summary rows (for epoch listeners)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Write epoch `batch_id`; returns only when its output and offsets are committed.

        Raises:
            EpochRefusedError: the job is stopping (`coordinator.gate` is closed); nothing was written.
        """
        c = self.coordinator
        pause = c.settings.min_pause_ms / 1000 - (time.monotonic() - self._last_end)
        if self._last_end and pause > 0:
            c.gate.pause(pause)
        try:
            with c.gate.epoch(self.sink, batch_id):
                self._write(batch, batch_id)
        finally:
            self._last_end = time.monotonic()

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        c = self.coordinator
        began = time.time()
        location = c.location(self.sink)
        checkpoint = checkpoint_id(location)
        ends = epoch_end_offsets(location, batch_id)
        c.check_owner()
        for config in self.shape.sinks:
            check_columns(config, batch)
        shape = self.shape
        guarantee = c.settings.guarantee
        tasks = skipped = 0
        self._task_rows = []
        try:
            if guarantee == AT_MOST_ONCE:
                # Offsets first, output after: a replayed epoch whose offsets were committed (its output may have
                # been written before the crash) writes nothing, so nothing is ever written twice.
                if c.offsets_committed(ends, checkpoint, batch_id, self.sink):
                    written, skipped = 0, 1
                else:
                    c.commit_source_offsets(ends, checkpoint, batch_id, self.sink)
                    written = self.plain.write(batch, batch_id)
                mode = AT_MOST_ONCE
            elif guarantee == AT_LEAST_ONCE:
                written = self.plain.write(batch, batch_id)
                c.commit_source_offsets(ends, checkpoint, batch_id, self.sink)
                mode = AT_LEAST_ONCE
            else:
                mode = shape.mode
                written, tasks, skipped = self._exactly_once(batch, batch_id, checkpoint, ends)
                if mode == SHUFFLING:
                    c.commit_source_offsets(ends, checkpoint, batch_id, self.sink)
        except Exception as exc:
            c.record(
                self._entry(
                    checkpoint, batch_id, shape.mode, ends, 0, tasks, skipped, began, "failed", str(exc)
                ),
                self.sink,
                self._task_rows,
            )
            raise
        c.record(
            self._entry(checkpoint, batch_id, mode, ends, written, tasks, skipped, began, "committed", None),
            self.sink,
            self._task_rows,
        )

    def _exactly_once(
        self, batch: DataFrame, batch_id: int, checkpoint: str, ends: list[dict[str, dict[str, int]]]
    ) -> tuple[int, int, int]:
        c = self.coordinator
        shape = self.shape
        outputs = self.plain.outputs(batch)
        if shape.mode == PARTITION_PRESERVING:
            (source,) = c.query_sources(self.sink)
            inputs = sorted(
                (t, int(p), int(o))
                for offsets in ends
                for t, parts in offsets.items()
                for p, o in parts.items()
            )
            slots = tuple(TaskSlot(f"{t}-{p}", source.group, t, p, o) for t, p, o in inputs)
            frame = batch  # one Spark partition per input partition: a task past the slots refuses to write
        else:
            tasks = c.settings.sink_tasks
            group = f"{c.settings.app_id}.ethereal-progress.{self.sink}"
            topic = progress_topic(c.settings.app_id)
            slots = tuple(TaskSlot(str(p), group, topic, p, batch_id + 1) for p in range(tasks))
            frame = _hash_partitioned(
                batch, tasks, [(s.key_column, c.output_partitions(s.name)) for s in shape.sinks]
            )
        write = EpochWrite(
            app_id=c.settings.app_id,
            instance_id=c.instance_id,
            checkpoint_id=checkpoint,
            epoch=batch_id,
            query=self.sink,
            outputs=outputs,
            slots=slots,
            transaction_timeout_ms=c.settings.transaction_timeout_ms,
        )
        rows = frame.mapInArrow(lambda it: write_task(write, it), RESULT_SCHEMA).collect()
        self._task_rows = rows
        ran = sorted(int(r["task"]) for r in rows)
        if ran != list(range(len(slots))):
            raise RecoveryError(
                f"sink {self.sink}: epoch {batch_id} ran sink tasks {ran} for {len(slots)} slot(s); each slot "
                "needs exactly one Spark partition (a partition-preserving job keeps one per Kafka partition)"
            )
        written = sum(int(r["records"]) for r in rows)
        skipped = sum(int(r["skipped"]) for r in rows)
        return written, len(rows), skipped

    def _start_offsets(self, epoch: int) -> dict[str, dict[str, int]]:
        """Start offsets of `epoch`: the previous epoch's end offsets, or the pinned initial offsets ({} if none)."""
        location = self.coordinator.location(self.sink)
        merged: dict[str, dict[str, int]] = {}
        try:
            previous = epoch_end_offsets(location, epoch - 1) if epoch > 0 else []
        except CheckpointLogError:
            previous = []
        if epoch == 0:
            for source in self.coordinator.query_sources(self.sink):
                pinned = Path(f"{source.checkpoint_location}/ethereal-kafka/{initial_offsets_file(source)}")
                if source.checkpoint_location and pinned.exists():
                    previous.append(json.loads(pinned.read_text(encoding="utf-8")))
        for offsets in previous:
            for topic, parts in offsets.items():
                merged.setdefault(topic, {}).update({str(p): int(o) for p, o in parts.items()})
        return merged

    def _entry(
        self,
        checkpoint: str,
        epoch: int,
        mode: str,
        ends: list[dict[str, dict[str, int]]],
        written: int,
        tasks: int,
        skipped: int,
        began: float,
        outcome: str,
        error: str | None,
    ) -> EpochRecord:
        from ethereal_kafka.checkpoint.history import EpochRecord

        merged: dict[str, dict[str, int]] = {}
        for offsets in ends:
            for topic, parts in offsets.items():
                merged.setdefault(topic, {}).update(parts)
        starts = self._start_offsets(epoch)
        records_in = (
            sum(
                max(0, o - starts.get(t, {}).get(p, o))
                for t, parts in merged.items()
                for p, o in parts.items()
            )
            if starts
            else -1
        )
        committed = outcome == "committed"
        rows = [r for r in self._task_rows if not int(r["skipped"])]
        commits = [float(r["commit_ms"]) for r in rows if r["commit_ms"] is not None]
        app_id = self.coordinator.settings.app_id
        return EpochRecord(
            app_id=app_id,
            checkpoint_id=checkpoint,
            epoch=epoch,
            mode=mode,
            start_offsets=starts,
            end_offsets=merged,
            records_in=records_in,
            records_out=written,
            tasks=tasks,
            skipped_tasks=skipped,
            started_ms=int(began * 1000),
            duration_ms=int((time.time() - began) * 1000),
            outcome=outcome,
            error=error,
            query=self.sink,
            watermark_ms=epoch_watermark_ms(self.coordinator.location(self.sink), epoch),
            commit_ms=max(commits) if commits else None,
            txn_aborts=sum(max(0, int(r["attempts"] or 1) - 1) for r in rows),
            marker=EpochMarker(app_id, checkpoint, epoch).render() if committed else None,
            marker_offsets=self._marker_offsets(mode, epoch, merged) if committed else {},
        )

    def _marker_offsets(
        self, mode: str, epoch: int, ends: dict[str, dict[str, int]]
    ) -> dict[str, dict[str, dict[str, int]]]:
        """Where epoch `epoch`'s marker was committed: per consumer group, `{topic: {partition: offset}}`."""
        c = self.coordinator
        out: dict[str, dict[str, dict[str, int]]] = {}
        if mode == SHUFFLING:
            group = f"{c.settings.app_id}.ethereal-progress.{self.sink}"
            slots = {str(p): epoch + 1 for p in range(c.settings.sink_tasks)}
            out[group] = {progress_topic(c.settings.app_id): slots}
        for source in c.query_sources(self.sink):
            read = {t: dict(parts) for t, parts in ends.items() if c._reads(source, t)}
            if read:
                out.setdefault(source.group, {}).update(read)
        return out


#: Columns giving a row's place in its key's order, best first: a framework operator's emission sequence, the
#: source position a DataStream element carries, or a DataFrame's `offset` column.
_POSITIONS: tuple[tuple[str, ...], ...] = (("__seq",), ("__part", "__off"), ("offset",))


def _hash_partitioned(batch: DataFrame, tasks: int, sinks: list[tuple[str, int | None]]) -> DataFrame:
    """Rows over exactly `tasks` Spark partitions, sorted inside each, so what reaches sink task p on a replay is
    what reached it the first time, in the same order.

    Args:
        sinks: Per sink of the query (in `__sink` index order), its key column and its fixed topic's partition
            count (None when rows name their topic).

    With fixed sink topics (and no `partition` column of the user's), each row's Kafka partition is computed here
    from its key (Spark's murmur3 `hash`) and rows are grouped by (sink, partition): every Kafka partition is
    written by exactly one task, and epochs commit in order, so each output partition receives the same records
    in the same order on every replay.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType

    frame = batch
    multi = len(sinks) > 1 and SINK_INDEX_COLUMN in frame.columns
    if "partition" not in frame.columns:
        choices = [
            (i, F.pmod(F.hash(F.col(key)), F.lit(count)))
            for i, (key, count) in enumerate(sinks)
            if count and key in frame.columns
        ]
        if multi and choices:
            expr = None
            for i, chosen in choices:
                expr = (F if expr is None else expr).when(F.col(SINK_INDEX_COLUMN) == i, chosen)
            frame = frame.withColumn("partition", expr)  # type: ignore[arg-type]
        elif not multi and choices:
            frame = frame.withColumn("partition", choices[0][1])
    orderable = [f.name for f in frame.schema.fields if not isinstance(f.dataType, MapType | ArrayType)]
    key_column = sinks[0][0]
    if "partition" in frame.columns:
        by = [SINK_INDEX_COLUMN, "partition"] if multi else ["partition"]
    elif multi:
        by = [SINK_INDEX_COLUMN]
    else:
        by = [key_column if key_column in frame.columns else orderable[0]]
    first = [c for c in by if c in orderable]
    # Within a key, rows keep the order they were emitted or read in (a framework operator's `__seq`, else the
    # source position), not the order of their values; the other columns only break ties, for determinism.
    key_first = [c for c in (key_column,) if c in orderable and c not in first]
    position = next((cols for cols in _POSITIONS if all(c in orderable for c in cols)), ())
    then = [*first, *key_first, *[c for c in position if c not in first]]
    return frame.repartition(tasks, *by).sortWithinPartitions(*then, *[c for c in orderable if c not in then])
