"""Start-up checks of the exactly-once protocol (driver, before any query starts); each refuses with one line
rather than let a job write wrong output.

Called by `CheckpointCoordinator.prepare`, in this order: the transaction timeout (`check_transaction_timeout`);
the checks against Kafka's markers (`refuse_lost_state`: a stateful query without its checkpoint;
`check_log_against_kafka`: a checkpoint behind Kafka; each query's write layout, `eos.layout`) on the last committed
markers; the progress topic (`ensure_progress_topic`); the claim (`eos.ownership`) and the fencing of the
transactional id pool (`transactional_pool`, `fence_pool`); then the checks against Kafka again, on stable reads.
The first pass refuses before the start changes anything without waiting for a dead predecessor's open
transaction; the second sees what the fence settled (a transaction that was committing when its instance died).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic

from ethereal_kafka.checkpoint.spark_log import (
    CheckpointLogError,
    checkpoint_id,
    has_progress,
    logged_epochs,
    uncommitted_epoch,
)
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.clients import admin_client, cluster_metadata, with_retries
from ethereal_kafka.connectors.kafka.epoch_bounds import check_bounds_fit
from ethereal_kafka.connectors.kafka.positions import PositionResolver
from ethereal_kafka.eos.committed import CommittedOffset, committed_offsets
from ethereal_kafka.eos.errors import CheckpointMismatchError, RecoveryError
from ethereal_kafka.eos.markers import EpochMarker
from ethereal_kafka.eos.names import phase_two_id, progress_group, progress_topic, transactional_id
from ethereal_kafka.eos.task_plan import EpochRanges
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.plan.query import Layout, Query

log = logging.getLogger(__name__)

#: The broker's `transaction.max.timeout.ms` when it does not say (Kafka's default, 15 minutes).
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000


def _group_offsets(source: KafkaSourceConfig, stable: bool) -> list[CommittedOffset]:
    """What `source`'s group has committed on every partition the source reads (`eos.committed.committed_offsets`)."""
    resolver = PositionResolver(source)
    try:
        tps = resolver.topic_partitions()
    finally:
        resolver.close()
    return committed_offsets(source.bootstrap_servers, source.group, source.passthrough, tps, stable=stable)


def refuse_lost_state(
    app_id: str, location: str, sources: Iterable[KafkaSourceConfig], stable: bool = True
) -> None:
    """A stateful query whose Spark checkpoint has no epochs must not start while its groups hold offsets with
    this app's epoch markers: its operator state is gone. `stable`: see `eos.committed.committed_offsets`.

    Raises:
        RecoveryError: one line naming the group, the marker's epoch and checkpoint, and the ways out.
    """
    for source in sources:
        for offset in _group_offsets(source, stable):
            marker = offset.marker
            if marker is not None and marker.app_id == app_id:
                raise RecoveryError(
                    f"stateful job {app_id}: its Spark checkpoint {location} is gone but "
                    f"group {source.group} holds offsets committed at epoch {marker.epoch} of checkpoint "
                    f"{marker.checkpoint_id}; the operator state is lost. Restore the checkpoint, or replay from "
                    f"an explicit position (`ethereal-kafka replay {app_id} --from ...`, or "
                    "`replay.from=earliest|timestamp:<ms>|topic:partition:offset,...` in the job file)."
                )


@dataclass(frozen=True)
class QueryMarkers:
    """Where one query's epoch markers live in Kafka, and its Spark checkpoint.

    Attributes:
        location: The query's Spark checkpoint folder.
        sources: The sources it reads (their groups hold its offsets' markers).
        sink_tasks: Its progress partitions (shuffling).
        bootstrap, passthrough: The cluster of the progress topic (the sinks').
        stable: Read markers stably (see `eos.committed.committed_offsets`); False only before the id pool is fenced.
    """

    app_id: str
    query: Query
    location: str
    sources: tuple[KafkaSourceConfig, ...]
    sink_tasks: int
    bootstrap: str
    passthrough: Mapping[str, str]
    stable: bool = True

    def read(self) -> Iterator[tuple[str, EpochMarker]]:
        """Every epoch marker Kafka holds for the query: on its sources' groups, and (shuffling) on its progress
        group; each with where it was read."""
        progress = self.sink_tasks if self.query.layout == Layout.SHUFFLING else 0
        yield from read_markers(
            self.app_id,
            self.query.name,
            self.sources,
            progress,
            self.bootstrap,
            self.passthrough,
            self.stable,
        )


def read_markers(
    app_id: str,
    query: str,
    sources: Iterable[KafkaSourceConfig],
    progress_partitions: int,
    bootstrap: str,
    passthrough: Mapping[str, str],
    stable: bool = True,
) -> Iterator[tuple[str, EpochMarker]]:
    """Every epoch marker Kafka holds on `sources`' groups and on the first `progress_partitions` partitions of the
    query's progress group (0: none, a query that keeps Kafka's partitioning), each with where it was read.

    Raises:
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    for source in sources:
        for offset in _group_offsets(source, stable):
            if offset.marker is not None:
                yield f"group {source.group}, {offset.topic}[{offset.partition}]", offset.marker
    if progress_partitions:
        group, topic = progress_group(app_id, query), progress_topic(app_id)
        parts = [(topic, p) for p in range(progress_partitions)]
        for offset in committed_offsets(bootstrap, group, passthrough, parts, stable=stable):
            if offset.marker is not None:
                yield f"group {group}, {offset.topic}[{offset.partition}]", offset.marker


def check_log_against_kafka(scope: QueryMarkers) -> None:
    """Compare the epoch markers Kafka holds for a query's Spark checkpoint with the checkpoint's offset log: every
    marker of this checkpoint must name an epoch the log still has, over the input ranges the log gives it.

    A checkpoint restored from a backup, a deleted `offsets/N`, or a host crash that lost unsynced checkpoint files
    leaves Spark's log behind Kafka: Spark would re-plan the epochs Kafka already holds with other bounds, and the
    tasks would skip records never written (or write some twice). Markers of another checkpoint (a reset) are not
    this checkpoint's history and are ignored, as everywhere.

    Raises:
        CheckpointMismatchError: one line naming the query, the group and partition, the epochs and the way out.
    """
    location, app_id, name = scope.location, scope.app_id, scope.query.name
    if "://" in location or not has_progress(location):
        return
    try:
        checkpoint = checkpoint_id(location)
    except CheckpointLogError:
        return
    logged = logged_epochs(location)
    last = logged[-1]
    for where, marker in scope.read():
        if not marker.of(app_id, checkpoint):
            continue
        if marker.epoch > last:
            raise CheckpointMismatchError(
                f"query {name}: Spark's checkpoint {location} is behind Kafka: its offset log ends at epoch "
                f"{last}, but {where} holds epoch {marker.epoch} of the same checkpoint; epochs {last + 1} to "
                f"{marker.epoch} were committed over offsets the log no longer has, and re-planning them would lose "
                f"or repeat output. Restore the checkpoint's files of those epochs (offsets/, commits/), or replay "
                f"from an explicit position (`ethereal-kafka replay {app_id} --from ...`)"
            )
        if marker.ranges is None or marker.epoch not in logged:
            continue
        try:
            logged_ranges = EpochRanges.of(location, marker.epoch, scope.sources).digest
        except CheckpointLogError:
            continue
        if logged_ranges != marker.ranges:
            raise CheckpointMismatchError(
                f"query {name}: Spark's checkpoint {location} disagrees with Kafka: {where} holds epoch "
                f"{marker.epoch} of the same checkpoint committed over other input ranges than its offset log now "
                f"gives that epoch (a checkpoint restored from a backup, or offset log files lost and re-planned). "
                f"Restore the checkpoint's files of epoch {marker.epoch}, or replay from an explicit position "
                f"(`ethereal-kafka replay {app_id} --from ...`)"
            )


def half_committed_epoch(scope: QueryMarkers) -> int | None:
    """The epoch Spark logged but did not commit, when Kafka holds any marker of it written under the scope's
    query layout (some of its tasks, or its phase two, committed); None otherwise."""
    epoch = uncommitted_epoch(scope.location)
    if epoch is None:
        return None
    try:
        checkpoint = checkpoint_id(scope.location)
    except CheckpointLogError:
        return None
    for _, marker in scope.read():
        if marker.of(scope.app_id, checkpoint) and marker.epoch == epoch:
            return epoch
    return None


def check_transaction_timeout(
    timeout_ms: int,
    epoch_interval_ms: int,
    sources: Iterable[KafkaSourceConfig],
    bootstrap: str,
    passthrough: Mapping[str, str],
) -> None:
    """The transaction timeout must cover the epoch interval and the largest epoch the sources' bounds allow, and
    stay within the broker's `transaction.max.timeout.ms` (asked with DescribeConfigs).

    Raises:
        ConfigError: one line naming the setting and the limit it breaks.
    """
    if timeout_ms < epoch_interval_ms:
        raise ConfigError(
            f"transaction.timeout.ms={timeout_ms} is shorter than the epoch interval {epoch_interval_ms}"
        )
    check_bounds_fit(sources, timeout_ms, epoch_interval_ms)
    admin = admin_client(bootstrap, passthrough)
    brokers = cluster_metadata(admin, bootstrap).brokers
    resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
    described = with_retries(
        "broker config query",
        bootstrap,
        lambda: admin.describe_configs([resource])[resource].result(timeout=30),
    )
    entry = described.get("transaction.max.timeout.ms")
    maximum = int(entry.value) if entry is not None and entry.value else DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
    if timeout_ms > maximum:
        raise ConfigError(
            f"transaction.timeout.ms={timeout_ms} exceeds the broker's transaction.max.timeout.ms={maximum}"
        )


def ensure_progress_topic(
    app_id: str, sink_tasks: int, bootstrap: str, passthrough: Mapping[str, str], may_grow: bool = False
) -> None:
    """Create the progress topic (compacted, one partition per sink task, the cluster's default replication) unless
    it exists, and wait until its partitions are known. `may_grow`: a replay started a fresh checkpoint (its
    progress groups were deleted, no marker of the new checkpoint exists yet), so a topic with fewer partitions
    than the job now has sink tasks gets more, where otherwise it is refused.

    Raises:
        ConfigError: the topic exists with fewer partitions than the job has sink tasks.
    """
    topic = progress_topic(app_id)
    admin = admin_client(bootstrap, passthrough)
    existing = cluster_metadata(admin, bootstrap).topics.get(topic)
    if existing is None:
        # Replication -1: the cluster's default (3 on a production cluster), like the topics holding the markers.
        futures = admin.create_topics(
            [NewTopic(topic, max(1, sink_tasks), -1, config={"cleanup.policy": "compact"})]
        )
        try:
            futures[topic].result(timeout=30)
        except Exception as exc:  # created concurrently by another instance: fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    elif len(existing.partitions) < sink_tasks and may_grow:
        futures = admin.create_partitions([NewPartitions(topic, sink_tasks)])
        futures[topic].result(timeout=30)
        log.info(
            "progress topic %s: %d -> %d partitions (a replay)", topic, len(existing.partitions), sink_tasks
        )
    elif len(existing.partitions) < sink_tasks:
        raise ConfigError(
            f"progress topic {topic} has {len(existing.partitions)} partitions but the job has "
            f"{sink_tasks} sink tasks: sink tasks are fixed for a job's life"
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = cluster_metadata(admin, bootstrap).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return
        time.sleep(0.1)


#: One transactional id of the pool: the id, and the source whose cluster it lives on (phase-two ids), or None
#: (the sinks' cluster).
PoolEntry = tuple[str, KafkaSourceConfig | None]


def transactional_pool(
    app_id: str,
    queries: Sequence[Query],
    sink_tasks: int,
    sources_of: Callable[[str], list[KafkaSourceConfig]],
) -> list[PoolEntry]:
    """Every transactional id the job may use: its sink tasks' (per input partition of partition-preserving
    queries, per sink task of shuffling ones) and its shuffling queries' phase-two ids (one per source)."""
    ids: list[PoolEntry] = []
    for query in queries:
        if query.layout == Layout.PARTITION_PRESERVING:
            (source,) = sources_of(query.name)
            resolver = PositionResolver(source)
            try:
                tps = resolver.topic_partitions()
            finally:
                resolver.close()
            ids += [(transactional_id(app_id, query.name, f"{t}-{p}"), None) for t, p in tps]
        else:
            ids += [(transactional_id(app_id, query.name, str(p)), None) for p in range(sink_tasks)]
            ids += [(phase_two_id(app_id, query.name, s.name), s) for s in sources_of(query.name)]
    return ids


def fence_pool(
    pool: Sequence[PoolEntry],
    sink_producer: Callable[[str], Producer],
    phase_two_producer: Callable[[str, KafkaSourceConfig], Producer],
) -> dict[str, Producer]:
    """`init_transactions` over the whole pool, in parallel: older holders are fenced and their open transactions
    aborted. Returns the phase-two producers (kept: the coordinator commits its epochs with them, and a later
    instance's fencing makes an old one's phase two fail instead of moving offsets backwards); the sink tasks'
    producers are let go (each task attempt builds its own)."""

    def fence(entry: PoolEntry) -> tuple[str, Producer]:
        txn_id, source = entry
        if source is not None:
            return txn_id, phase_two_producer(txn_id, source)
        return txn_id, sink_producer(txn_id)

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(pool)))) as workers:
        fenced = dict(workers.map(fence, pool))
    phase_two = {txn_id for txn_id, source in pool if source is not None}
    kept = {}
    for txn_id, producer in fenced.items():
        if txn_id in phase_two:
            kept[txn_id] = producer
        else:
            producer.flush(0)
    return kept
