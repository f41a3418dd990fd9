"""The checkpoint coordinator (driver side): start-up checks and fencing, phase two, and the epoch history.

`prepare()` runs once before the queries start: it checks that the job can resume safely (recovery, the
transaction timeout against the epoch bounds and the broker, each shuffling query's write layout), creates the
progress topic, commits this instance's owner claim, and runs `init_transactions` over the whole transactional id
pool (fencing zombies and aborting their open transactions).

Each query's epochs are written by its `checkpoint.epoch_writer.EpochWriter`, which calls back here for phase two
(`commit_source_offsets`: the input end offsets, and the epoch's dead letters, in a transaction of the query's
phase-two producer) and to record the epoch (`record`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic

from ethereal_kafka.checkpoint.errors import RecoveryError
from ethereal_kafka.checkpoint.gate import EpochGate
from ethereal_kafka.checkpoint.layout import WriteLayout, check_layout, read_layout, record_layout
from ethereal_kafka.checkpoint.ownership import describe, read_claim, write_claim
from ethereal_kafka.checkpoint.spark_log import (
    has_progress,
)
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.connectors.kafka.clients import (
    admin_client,
    bounded_call,
    cluster_metadata,
    group_consumer,
    transactional_producer,
    with_retries,
)
from ethereal_kafka.connectors.kafka.dead_letters import (
    DEAD_LETTERS_ACCUMULATOR_ID,
    DeadLetter,
    DeadLetterReport,
    unique,
)
from ethereal_kafka.connectors.kafka.encoding import OutRecord
from ethereal_kafka.connectors.kafka.epoch_bounds import check_bounds_fit
from ethereal_kafka.connectors.kafka.epoch_write import (
    progress_topic,
    transactional_id,
)
from ethereal_kafka.connectors.kafka.errors import FencedError
from ethereal_kafka.connectors.kafka.markers import EpochMarker, OwnerClaim
from ethereal_kafka.connectors.kafka.positions import PositionResolver
from ethereal_kafka.connectors.kafka.read_stats import ReportChannel
from ethereal_kafka.connectors.kafka.sink import check_same_cluster, send_records
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.plan.classify import PARTITION_PRESERVING, SHUFFLING

if TYPE_CHECKING:
    from ethereal_kafka.checkpoint.history import EpochRecord, HistoryLog

log = logging.getLogger(__name__)

#: Errors that mean another instance fenced this one's producer.
_FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
#: Client errors after which a phase-two producer is replaced before its next transaction: it lost its brokers, and
#: librdkafka can keep a stale group coordinator cached, on which `send_offsets_to_transaction` then blocks past its
#: timeout (confluentinc/librdkafka#5456, #5511; measured here after a broker restart: the call hung until
#: `bounded_call` gave up, 35 s, and the epoch took 41-69 s). A new producer's `init_transactions` looks the
#: coordinators up afresh, and fences the old one.
_CONNECTION_LOST_CODES = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
AT_MOST_ONCE = "at-most-once"


#: How long phase two of an epoch may wait on the broker: the marker check and the offset commit it guards. A
#: broker restart costs the epoch spanning it 7-17 s here (`_CONNECTION_LOST_CODES`); the budget leaves room for a
#: slow cluster (a stable offset read also waits for an open transaction of the group to end).
PHASE_TWO_DEADLINE_S = 180.0


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
        self._stale_phase_two: set[str] = set()  # phase-two producers that lost their brokers since built
        self._dead_letters: dict[tuple[str, str, int, int], list[DeadLetter]] = {}
        self._dead_letter_lock = threading.Lock()
        self._dead_letter_channel: ReportChannel | None = None
        self._shuffling_groups: set[str] = set()
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
            self._open_dead_letters()

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
            if source is not None:
                return txn_id, self._phase_two_producer(txn_id, source)
            return txn_id, transactional_producer(
                txn_id, self.bootstrap, self.settings.transaction_timeout_ms, self.passthrough
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
        if self._dead_letter_channel is not None:
            self._dead_letter_channel.close()
            self._dead_letter_channel = None
        producers, self._phase_two = list(self._phase_two.values()), {}
        for producer in producers:
            with contextlib.suppress(KafkaException):
                producer.flush(0)

    # -- epochs --------------------------------------------------------------------------------------------------
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
                txn_id = self._phase_two_id(query, source) if query else None
                if txn_id is not None and txn_id in self._phase_two:
                    letters = self._take_dead_letters(source, tps)
                    if self._marker_covers(source, tps, checkpoint, epoch):
                        continue  # a replay of an epoch whose phase two committed: its dead letters too
                    self._commit_in_transaction(txn_id, consumer, tps, source, letters)
                    continue
                with_retries(
                    f"offset commit for group {source.group}",
                    source.bootstrap_servers,
                    lambda c=consumer, o=tps: c.commit(offsets=o, asynchronous=False),  # type: ignore[misc]
                )

    def _marker_covers(
        self, source: KafkaSourceConfig, tps: list[TopicPartition], checkpoint: str, epoch: int
    ) -> bool:
        """True when `source`'s group already holds the marker of `epoch` of this checkpoint on one of `tps`."""
        consumer = group_consumer(source.bootstrap_servers, source.group, source.passthrough)
        query = [TopicPartition(tp.topic, tp.partition) for tp in tps]
        found = with_retries(
            f"committed offsets of group {source.group}",
            source.bootstrap_servers,
            lambda: consumer.committed(query, timeout=30),
            attempts=8,
            deadline_s=PHASE_TWO_DEADLINE_S,
        )
        markers = (EpochMarker.parse(tp.metadata) for tp in found)
        return any(m is not None and m.covers(self.settings.app_id, checkpoint, epoch) for m in markers)

    def _take_dead_letters(self, source: KafkaSourceConfig, tps: list[TopicPartition]) -> list[DeadLetter]:
        """The dead letters the reads of these ranges (`tps` carry each range's end) reported, once each."""
        with self._dead_letter_lock:
            taken = [
                self._dead_letters.pop((source.group, tp.topic, tp.partition, tp.offset), []) for tp in tps
            ]
        return unique(d for letters in taken for d in letters)

    def _on_dead_letters(self, reports: list[DeadLetterReport]) -> None:
        """Keep what reads of shuffling queries report (the accumulator server's thread); the sink tasks of
        partition-preserving queries commit their own."""
        with self._dead_letter_lock:
            for report in reports:
                if report.group in self._shuffling_groups:
                    key = (report.group, report.topic, report.partition, report.until)
                    self._dead_letters.setdefault(key, []).extend(report.letters)

    def _open_dead_letters(self) -> None:
        """Listen for dead letters when a shuffling query reads a source with `on.error=dlq` under exactly-once."""
        self._shuffling_groups = {
            source.group
            for name, shape in self.shapes.items()
            if shape.mode == SHUFFLING
            for source in self.query_sources(name)
            if source.on_error == "dlq" and source.dlq_delivery == "epoch"
        }
        if self._shuffling_groups and self._dead_letter_channel is None:
            self._dead_letter_channel = ReportChannel(
                self._on_dead_letters, DEAD_LETTERS_ACCUMULATOR_ID, DeadLetterReport
            )
            self._dead_letter_channel.open()

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
        self,
        txn_id: str,
        consumer: Any,
        tps: list[TopicPartition],
        source: KafkaSourceConfig,
        letters: list[DeadLetter],
    ) -> None:
        """One transaction of the phase-two producer `txn_id`: the epoch's dead letters of `source` (shuffling
        queries, `on.error=dlq`), then its end offsets with the marker. Every call that waits on the broker is
        bounded (`bounded_call`): after a coordinator restart librdkafka's `send_offsets_to_transaction` can block
        forever, and the epoch must instead go on with a new producer."""
        records = [OutRecord(str(source.dlq_topic), None, d.key, d.value, list(d.headers)) for d in letters]

        def commit() -> None:
            self._phase_two[txn_id].poll(0)  # serves the client's error events (`_note_client_error`)
            if txn_id in self._stale_phase_two:
                self._renew_phase_two(txn_id, source, "it lost its connection to the brokers")
            current = self._phase_two[txn_id]
            try:
                current.begin_transaction()
                send_records(current, records, None)
                metadata = consumer.consumer_group_metadata()
                bounded_call(
                    "send_offsets_to_transaction",
                    lambda: current.send_offsets_to_transaction(tps, metadata, 30),
                )
                bounded_call("commit_transaction", lambda: current.commit_transaction(30))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                unusable = (
                    error is None or error.fatal() or error.code() in _FENCED_CODES | {KafkaError._TIMED_OUT}
                )
                if not unusable:
                    try:
                        bounded_call("abort_transaction", lambda: current.abort_transaction(30))
                    except KafkaException:
                        unusable = True
                if unusable:
                    # Fenced by another instance (stop), or a producer that cannot go on (a call that never
                    # returned after a coordinator restart, a fatal error, a failed abort): a new producer for the
                    # same id fences it and aborts its transaction, and the commit is tried again.
                    self._renew_phase_two(txn_id, source, str(exc))
                raise

        with_retries(
            f"offset commit for group {source.group}",
            source.bootstrap_servers,
            commit,
            attempts=8,
            deadline_s=PHASE_TWO_DEADLINE_S,
        )

    def _renew_phase_two(self, txn_id: str, source: KafkaSourceConfig, cause: str) -> None:
        """Replace a phase-two producer that cannot go on (`cause` says why), unless another instance took the app
        over.

        Raises:
            FencedError: the owner claim names another instance (its start fenced this one's producer).
        """
        try:
            self.check_owner()
        except FencedError as exc:
            raise FencedError(
                f"{exc}; the phase-two commit for group {source.group} was fenced ({cause})"
            ) from exc
        log.info("phase-two producer %s renewed: %s", txn_id, cause)
        self._phase_two[txn_id] = self._phase_two_producer(txn_id, source)

    def _phase_two_producer(self, txn_id: str, source: KafkaSourceConfig) -> Producer:
        """A new, initialised phase-two producer for `txn_id` (fencing older ones), not stale."""
        producer = transactional_producer(
            txn_id,
            source.bootstrap_servers,
            self.settings.transaction_timeout_ms,
            source.passthrough,
            on_error=lambda error: self._note_client_error(txn_id, error),
        )
        self._stale_phase_two.discard(txn_id)
        return producer

    def _note_client_error(self, txn_id: str, error: KafkaError) -> None:
        """A phase-two producer's client error (served by `poll`): a lost connection marks it stale."""
        if error.code() in _CONNECTION_LOST_CODES:
            self._stale_phase_two.add(txn_id)

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
