"""The checkpoint coordinator (driver side): one job run's hold on the exactly-once protocol.

`prepare()` runs once before the queries start (`eos.startup`): it checks that the job can resume safely (recovery,
the transaction timeout against the epoch bounds and the broker, each shuffling query's write layout), creates the
progress topic, commits this instance's owner claim (`eos.ownership`), and runs `init_transactions` over the whole
transactional id pool (fencing zombies and aborting their open transactions).

Each query's epochs are written by its `eos.epoch_writer.EpochWriter`, which calls back here for phase two
(`commit_source_offsets`: the input end offsets, and the epoch's dead letters, `eos.phase_two`) and to record the
epoch (`record`: the checkpoint history, and the listeners that watch epochs: metrics, the web UI, the epoch sizer).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import TopicPartition

from ethereal_kafka.checkpoint.spark_log import has_progress
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.config.job import Guarantee, JobConfig
from ethereal_kafka.connectors.kafka.clients import (
    admin_client,
    cached_admin,
    cluster_metadata,
    group_consumer,
    transactional_producer,
    with_retries,
)
from ethereal_kafka.connectors.kafka.offsets import Offsets
from ethereal_kafka.connectors.kafka.sink import check_same_cluster
from ethereal_kafka.eos.dead_letters import DeadLetterCollector
from ethereal_kafka.eos.errors import FencedError
from ethereal_kafka.eos.gate import EpochGate
from ethereal_kafka.eos.layout import WriteLayout, check_or_record_layout, read_layout
from ethereal_kafka.eos.markers import EpochMarker, OwnerClaim
from ethereal_kafka.eos.names import phase_two_id
from ethereal_kafka.eos.ownership import ClaimWriter, describe, read_claim
from ethereal_kafka.eos.phase_two import PhaseTwo, marker_committed
from ethereal_kafka.eos.startup import (
    QueryMarkers,
    check_log_against_kafka,
    check_transaction_timeout,
    ensure_progress_topic,
    fence_pool,
    half_committed_epoch,
    refuse_lost_state,
    transactional_pool,
)
from ethereal_kafka.plan.query import Layout, Query

if TYPE_CHECKING:
    from ethereal_kafka.checkpoint.history import EpochRecord, HistoryLog

log = logging.getLogger(__name__)


class CheckpointCoordinator:
    """Owns the exactly-once protocol for one job run (one instance per app.id at a time).

    Args:
        job: The job's settings (app id, guarantee, checkpoint root, sink tasks, transaction timeout, epoch
            interval and pause).
        sources, sinks: The job's connectors as they run, by name.
        history: Where epoch outcomes are recorded (None: nowhere).
        owner: The claim this instance commits at start (`eos.ownership`); its id marks the instance's epochs.
        claims: The writer of this instance's claim (the instance guard's, whose heartbeat refreshes it); by
            default one for `owner`.
    """

    def __init__(
        self,
        job: JobConfig,
        sources: Mapping[str, KafkaSourceConfig],
        sinks: Mapping[str, KafkaSinkConfig],
        history: HistoryLog | None = None,
        owner: OwnerClaim | None = None,
        claims: ClaimWriter | None = None,
    ) -> None:
        self.job = job
        self.sources = dict(sources)
        self.sinks = dict(sinks)
        first = next(iter(self.sinks.values()))
        self.bootstrap = first.bootstrap_servers
        self.passthrough = first.passthrough
        self._own_claims = (
            claims is None
        )  # else the instance guard lets its writer go, after releasing the claim
        self.claims = claims or ClaimWriter(
            job.app_id, self.bootstrap, self.passthrough, owner or OwnerClaim(uuid.uuid4().hex[:16])
        )
        self.instance_id = self.claims.claim.instance_id
        self.queries: dict[str, Query] = {}
        self.history = history
        #: Asked `(query, record, the sink tasks' summary rows)` before each epoch outcome is recorded; each returns
        #: `EpochRecord` fields to add (the metrics' per-epoch latency and lag) or None.
        self.epoch_annotators: list[Callable[[str, EpochRecord, list[Any]], Mapping[str, Any] | None]] = []
        #: Told `(query, record, the sink tasks' summary rows)` after each epoch outcome is recorded (the web UI).
        self.epoch_listeners: list[Callable[[str, EpochRecord, list[Any]], None]] = []
        #: Told `(query, epoch)` when a query's writer starts an epoch: Spark has planned the epoch's reads by then
        #: (`runtime.planners`).
        self.epoch_begin_listeners: list[Callable[[str, int], None]] = []
        #: Every writer's epochs pass through it; the runner closes it to stop between epochs.
        self.gate = EpochGate()
        self.phase_two = PhaseTwo(job.transaction_timeout_ms, self.check_owner)
        self.dead_letters = DeadLetterCollector(())
        self._partitions: dict[str, int | None] = {}

    @property
    def app_id(self) -> str:
        """The job's app id."""
        return self.job.app_id

    # -- start-up ------------------------------------------------------------------------------------------------
    def location(self, query: str) -> str:
        """The Spark checkpoint folder of `query`."""
        return self.job.query_checkpoint(query)

    def prepare(self, queries: Sequence[Query], replaying: bool = False) -> None:
        """Check recovery, create the progress topic, claim the app, check timeouts, fence the id pool.

        Args:
            queries: The job's queries.
            replaying: The sources were told to start from an explicit position (a deliberate replay).

        Raises:
            RecoveryError: a stateful job lost its Spark checkpoint (and is not replaying).
            ConfigError: the transaction timeout does not fit the epoch interval or the broker's maximum, or a
                shuffling query's write layout changed.
        """
        for query in queries:
            check_same_cluster(query.sinks)
        self.queries = {q.name: q for q in queries}
        exactly_once = self.job.delivery_guarantee == Guarantee.EXACTLY_ONCE
        if exactly_once:
            check_transaction_timeout(
                self.job.transaction_timeout_ms,
                self.job.trigger_interval_ms,
                self.sources.values(),
                self.bootstrap,
                self.passthrough,
            )
        # The checks against Kafka's markers run before this start changes anything (refused, it has claimed and
        # fenced nothing) on the last committed markers: a stable read would wait out any transaction a dead
        # predecessor left open (its timeout, 60 s by default) and then fail. Once the fence has aborted (or
        # finished) those transactions, they run again on stable reads, which no longer wait: a transaction that
        # was committing when its instance died can have added a marker the first pass did not see.
        self._check_against_kafka(replaying, exactly_once, stable=False)
        ensure_progress_topic(self.app_id, self.job.sink_tasks, self.bootstrap, self.passthrough, replaying)
        self.claims.commit()
        if exactly_once:
            pool = transactional_pool(
                self.app_id, list(self.queries.values()), self.job.sink_tasks, self.query_sources
            )
            self.phase_two.keep(fence_pool(pool, self._sink_producer, self.phase_two.producer))
            self._check_against_kafka(replaying, exactly_once, stable=True)
            self._open_dead_letters()

    def _check_against_kafka(self, replaying: bool, exactly_once: bool, stable: bool) -> None:
        """The start-up checks that compare this start with Kafka's markers: a stateful query without its checkpoint,
        a checkpoint behind Kafka, a changed write layout (exactly-once). Raises RecoveryError,
        CheckpointMismatchError, ConfigError."""
        for name, query in self.queries.items():
            if query.stateful and not replaying and not has_progress(self.location(name)):
                refuse_lost_state(self.app_id, self.location(name), self.query_sources(name), stable)
            check_log_against_kafka(self._markers(query, stable=stable))
        if exactly_once:
            self._check_layouts(stable)

    def _sink_producer(self, txn_id: str) -> Any:
        return transactional_producer(
            txn_id, self.bootstrap, self.job.transaction_timeout_ms, self.passthrough
        )

    def _check_layouts(self, stable: bool) -> None:
        """Refuse a start whose shuffling layout changed, or that switches layouts while an epoch is half committed
        (`eos.layout`); the stable pass (after the fence) records each query's layout at its first start. Raises
        ConfigError."""
        if "://" in self.job.checkpoint_location:
            return
        for name, query in self.queries.items():
            location = self.location(name)
            if query.layout == Layout.SHUFFLING:
                partitions = {s.name: self.output_partitions(s.name) for s in query.sinks}
                current = WriteLayout(self.job.sink_tasks, partitions, query.layout)
            else:
                current = WriteLayout(0, {}, query.layout)
            recorded = read_layout(location)
            in_flight = None
            if recorded is not None and recorded.layout != query.layout:
                old = dataclasses.replace(query, layout=Layout(recorded.layout))
                in_flight = half_committed_epoch(self._markers(old, recorded.sink_tasks, stable))
            check_or_record_layout(name, location, current, in_flight, record=stable)

    def _markers(self, query: Query, sink_tasks: int = 0, stable: bool = True) -> QueryMarkers:
        """Where `query`'s markers live (`sink_tasks`: its progress partitions, when other than the job's; `stable`:
        see `QueryMarkers`)."""
        return QueryMarkers(
            self.app_id,
            query,
            self.location(query.name),
            tuple(self.query_sources(query.name)),
            sink_tasks or self.job.sink_tasks,
            self.bootstrap,
            self.passthrough,
            stable,
        )

    def query_sources(self, query: str) -> list[KafkaSourceConfig]:
        """The sources `query` reads (its own configs when it has them, else every source of the job)."""
        found = self.queries.get(query)
        return list(found.sources) if found is not None and found.sources else list(self.sources.values())

    def check_owner(self) -> None:
        """Raise FencedError when the claim names another instance than this one, or is gone (the progress topic
        deleted): this instance claimed the app in `prepare`, so a missing claim is never "nobody else"."""
        found = read_claim(self.app_id, self.bootstrap, self.passthrough)
        if found is None:
            raise FencedError(
                f"app {self.app_id}: the owner claim is gone (was the progress topic deleted?); this instance "
                f"({self.instance_id}) stops rather than write unclaimed"
            )
        if found[0].instance_id != self.instance_id:
            raise FencedError(
                f"app {self.app_id}: another instance ({describe(*found)}) took over; this one "
                f"({self.instance_id}) stops"
            )

    def pool(self) -> list[str]:
        """Every transactional id this job may use: its sink tasks' and its phase-two commits'."""
        return [txn_id for ids in self.pool_by_cluster().values() for txn_id in ids]

    def pool_by_cluster(self) -> dict[str, list[str]]:
        """The pool by the bootstrap servers of the cluster each id lives on (`replay` fences it)."""
        pool = transactional_pool(
            self.app_id, list(self.queries.values()), self.job.sink_tasks, self.query_sources
        )
        out: dict[str, list[str]] = {}
        for txn_id, source in pool:
            out.setdefault(source.bootstrap_servers if source is not None else self.bootstrap, []).append(
                txn_id
            )
        return out

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

    def output_ends(self, query: str) -> dict[str, dict[str, int]]:
        """The high watermark of every partition of `query`'s sink topics (`EpochRecord.output_ends`): read right
        after an epoch committed, it separates that epoch's output from the next epoch's. Empty for sinks whose
        rows name their topic, and when the cluster did not answer (logged: the figure is for `diff`, never for
        recovery)."""
        from ethereal_kafka.connectors.kafka.topic_admin import high_watermarks
        from ethereal_kafka.errors import EtherealKafkaError

        # The partition counts the run partitions its output by (`output_partitions`, looked up once).
        tps = [
            TopicPartition(sink.topic, p)
            for sink in self.queries[query].sinks
            if sink.topic
            for p in range(self.output_partitions(sink.name) or 0)
        ]
        if not tps:
            return {}
        try:
            admin = cached_admin(self.bootstrap, self.passthrough)
            found = high_watermarks(admin, tps, self.bootstrap, timeout_s=5.0)
        except EtherealKafkaError as exc:
            log.warning("query %s: output end offsets not recorded for this epoch: %s", query, exc)
            return {}
        # A partition whose leader did not answer reads as a negative offset: its topic has no cut for this epoch.
        return {
            topic: {str(p): o for p, o in parts.items()}
            for topic, parts in found.items()
            if all(o >= 0 for o in parts.values())
        }

    def close(self) -> None:
        """End of the run: close the checkpoint history (its writer stays open while epochs are recorded) and let
        the phase-two producers go."""
        if self.history is not None:
            self.history.close()
        self.dead_letters.close()
        self.phase_two.close()
        if self._own_claims:
            self.claims.close()

    # -- epochs --------------------------------------------------------------------------------------------------
    def commit_source_offsets(
        self,
        ends: Sequence[Offsets],
        checkpoint: str,
        epoch: int,
        query: str | None = None,
        ranges: str | None = None,
    ) -> None:
        """Commit epoch end offsets to the group of each source `query` reads, with the epoch marker as metadata
        (phase two). Under exactly-once each source's offsets are committed in a transaction of the query's
        phase-two producer (fenced by any later instance's start, so a taken-over instance cannot move them
        backwards); otherwise with a plain offset commit.

        Raises:
            FencedError: another instance fenced this one's phase-two producer.
            KafkaConnectionError: the commit did not succeed within bounded retries.
        """
        marker = EpochMarker(self.app_id, checkpoint, epoch, ranges).render()
        candidates = self.query_sources(query) if query is not None else list(self.sources.values())
        for offsets in ends:
            for source in [s for s in candidates if any(s.reads(t) for t in offsets.topics())]:
                tps = [TopicPartition(t, p, o, marker) for (t, p), o in offsets.items() if source.reads(t)]
                if not tps:
                    continue
                consumer = group_consumer(source.bootstrap_servers, source.group, source.passthrough)
                txn_id = phase_two_id(self.app_id, query, source.name) if query else None
                if txn_id is not None and self.phase_two.holds(txn_id):
                    letters = self.dead_letters.take(source.group, tps)
                    committed = EpochMarker(self.app_id, checkpoint, epoch, ranges)
                    if marker_committed(source, tps, committed):
                        continue  # a replay of an epoch whose phase two committed: its dead letters too
                    self.phase_two.commit(txn_id, source, consumer, tps, letters, committed)
                    continue
                with_retries(
                    f"offset commit for group {source.group}",
                    source.bootstrap_servers,
                    lambda c=consumer, o=tps: c.commit(offsets=o, asynchronous=False),  # type: ignore[misc]
                )

    def _open_dead_letters(self) -> None:
        """Listen for dead letters when a shuffling query reads a source with `on.error=dlq`, or the job dead-letters
        user-code errors (`on.user.error=dlq`), under exactly-once."""
        self.dead_letters.close()
        user = self.job.on_user_error == "dlq"
        self.dead_letters = DeadLetterCollector(
            source.group
            for name, query in self.queries.items()
            if query.layout == Layout.SHUFFLING
            for source in self.query_sources(name)
            if user or (source.on_error == "dlq" and source.dlq_delivery == "epoch")
        )
        self.dead_letters.open()

    def offsets_committed(
        self, ends: Sequence[Offsets], checkpoint: str, epoch: int, query: str, ranges: str | None = None
    ) -> bool:
        """True when a source group of `query` holds a marker proving `epoch` of this checkpoint (over `ranges`)
        committed its offsets (an at-most-once epoch being replayed).

        Raises:
            CheckpointMismatchError: a marker of this checkpoint records a later epoch, or this one over other ranges.
        """
        for source in self.query_sources(query):
            tps = [TopicPartition(t, p) for offsets in ends for (t, p) in offsets if source.reads(t)]
            if tps and marker_committed(source, tps, EpochMarker(self.app_id, checkpoint, epoch, ranges)):
                return True
        return False

    def begin(self, query: str, epoch: int) -> None:
        """Tell `epoch_begin_listeners` that `query`'s writer starts `epoch`; their failures are logged, never an
        epoch's."""
        for listener in self.epoch_begin_listeners:
            try:
                listener(query, epoch)
            except Exception:
                log.exception("epoch begin listener failed on epoch %s of %s", epoch, query)

    def record(self, entry: EpochRecord, query: str = "", tasks: Sequence[Any] = ()) -> None:
        """Let `epoch_annotators` add their figures to an epoch outcome, append it to the checkpoint history (when
        one is attached), then tell `epoch_listeners`.

        The annotators, the history and the listeners are for people; their failures are logged and never fail an
        epoch.
        """
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
