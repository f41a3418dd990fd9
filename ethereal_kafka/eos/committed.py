"""Read where an app stands in Kafka: committed group offsets with their markers, end offsets, lag, progress markers.

Read-only and safe while the app runs. Committed offsets are fetched by a read_committed consumer (stable offsets:
an offset still pending in an open transaction is waited for, never shown half-committed), and end offsets are the
last stable offsets, i.e. what a read_committed reader (the job's sources) can read now.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ethereal_kafka.checkpoint.apps import local_path
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.clients import (
    RETRY_DEADLINE_S,
    admin_client,
    cluster_metadata,
    group_consumer,
    watermarks,
    with_retries,
)
from ethereal_kafka.connectors.kafka.positions import PositionResolver
from ethereal_kafka.eos.markers import EpochMarker, ReplayMarker
from ethereal_kafka.eos.names import owner_group, progress_group, progress_topic


@dataclass(frozen=True)
class CommittedOffset:
    """One committed offset of a group: `offset` None when the group has none for the partition."""

    topic: str
    partition: int
    offset: int | None
    metadata: str | None

    @property
    def marker(self) -> EpochMarker | None:
        """The epoch marker the metadata carries, if it is one."""
        return EpochMarker.parse(self.metadata)

    @property
    def replay(self) -> ReplayMarker | None:
        """The replay marker the metadata carries, if it is one."""
        return ReplayMarker.parse(self.metadata)


@dataclass(frozen=True)
class PartitionOffsets:
    """One input partition of one source, as the job's consumer group sees it.

    Attributes:
        committed: The group's committed offset and metadata (offset None: never committed).
        earliest: The earliest retained offset (low watermark).
        end: The last stable offset: where a read_committed reader ends now.
    """

    source: str
    group: str
    committed: CommittedOffset
    earliest: int
    end: int

    @property
    def topic(self) -> str:
        """The input topic."""
        return self.committed.topic

    @property
    def partition(self) -> int:
        """The input partition."""
        return self.committed.partition

    @property
    def lag(self) -> int | None:
        """Records (offsets) between the committed offset and the end; None without a committed offset."""
        offset = self.committed.offset
        return None if offset is None else max(0, self.end - offset)


@dataclass(frozen=True)
class ProgressOffsets:
    """The progress markers of one shuffling query: group `{app}.ethereal-progress.{query}`, one per sink task."""

    query: str
    group: str
    topic: str
    partitions: tuple[CommittedOffset, ...]


def committed_offsets(
    bootstrap: str,
    group: str,
    passthrough: Mapping[str, str],
    tps: Iterable[tuple[str, int]],
    attempts: int = 30,
    deadline_s: float = RETRY_DEADLINE_S,
    stable: bool = True,
) -> list[CommittedOffset]:
    """The committed offsets (with metadata) of `group` for `tps`, in the order given: the one way the protocol
    reads offsets and their markers. A per-partition error is retried, never taken for "nothing committed".

    A stable read (the default, read_committed) waits for an offset pending in an open transaction, never reads it
    as absent; an open transaction of a dead instance keeps it waiting until the transaction times out or the id
    pool is fenced. `stable=False` reads the last committed offsets at once: only for checks that run before the
    fence and are repeated stably after it (`eos.coordinator.Coordinator.prepare`).

    Raises:
        KafkaConnectionError: the fetch kept failing for `attempts` tries or `deadline_s` seconds.
    """
    query = [TopicPartition(t, p) for t, p in tps]
    if not query:
        return []
    consumer = group_consumer(bootstrap, group, passthrough, stable)

    def fetch() -> list[TopicPartition]:
        found: list[TopicPartition] = consumer.committed(query, timeout=30)
        for tp in found:
            # A partition of a missing topic has nothing committed; any other per-partition error is retried.
            if tp.error is not None and tp.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaException(tp.error)
        return found

    out = []
    read = with_retries(f"committed offsets of group {group}", bootstrap, fetch, attempts, deadline_s)
    for tp in read:
        has = tp.error is None and tp.offset >= 0
        out.append(CommittedOffset(tp.topic, tp.partition, tp.offset if has else None, tp.metadata or None))
    return out


def source_offsets(source: KafkaSourceConfig, stable: bool = True) -> list[PartitionOffsets]:
    """Every current input partition of `source` with its group's committed offset, retained range and end
    (`stable`: see `committed_offsets`; False shows the last committed offsets without waiting for a dead run's
    open transaction).

    `source` must be configured as the job runs it (`group.id` defaulted to the app id, see
    `runtime.runner.job_sources`). End offsets are read_committed whatever the source's isolation level.

    Raises:
        ConfigError: a listed topic does not exist.
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    resolver = PositionResolver(dataclasses.replace(source, isolation_level="read_committed"))
    try:
        tps = resolver.topic_partitions()
        ranges = {
            tp: watermarks(resolver.consumer, TopicPartition(*tp), source.bootstrap_servers) for tp in tps
        }
    finally:
        resolver.close()
    committed = committed_offsets(
        source.bootstrap_servers, source.group, source.passthrough, tps, stable=stable
    )
    return [
        PartitionOffsets(source.name, source.group, c, *ranges[(c.topic, c.partition)]) for c in committed
    ]


def progress_queries(
    app_id: str, bootstrap: str, passthrough: Mapping[str, str], checkpoint_root: str | None = None
) -> list[str]:
    """Names of the app's queries that may hold progress markers, sorted.

    The union of the query folders under the checkpoint root (every sub-folder but `sources/`) and the groups named
    `{app}.ethereal-progress.{query}` on the cluster, so queries are found whether the checkpoint or the groups
    survive.
    """
    names: set[str] = set()
    root = local_path(checkpoint_root) if checkpoint_root else None
    if root is not None and root.is_dir():
        names.update(p.name for p in root.iterdir() if p.is_dir() and p.name != "sources")
    prefix = f"{progress_topic(app_id)}."
    admin = admin_client(bootstrap, passthrough)
    listed = with_retries(
        "consumer group listing", bootstrap, lambda: admin.list_consumer_groups(request_timeout=30).result()
    )
    names.update(g.group_id[len(prefix) :] for g in listed.valid if g.group_id.startswith(prefix))
    return sorted(n for n in names if n)


def progress_offsets(
    app_id: str,
    bootstrap: str,
    passthrough: Mapping[str, str],
    queries: Iterable[str],
    stable: bool = True,
) -> list[ProgressOffsets]:
    """The progress markers of `queries` (one per partition of the progress topic); empty without that topic.
    `stable`: see `committed_offsets`."""
    topic = progress_topic(app_id)
    found = cluster_metadata(admin_client(bootstrap, passthrough), bootstrap).topics.get(topic)
    if found is None or not found.partitions:
        return []
    parts = [(topic, p) for p in sorted(found.partitions)]
    out = []
    for query in queries:
        group = progress_group(app_id, query)
        offsets = committed_offsets(bootstrap, group, passthrough, parts, stable=stable)
        if any(c.offset is not None for c in offsets):
            out.append(ProgressOffsets(query, group, topic, tuple(offsets)))
    return out


def owner_claim(app_id: str, bootstrap: str, passthrough: Mapping[str, str]) -> CommittedOffset | None:
    """The app's owner claim: offset = claim time (epoch ms), metadata = the claiming instance id; None if never
    claimed (no exactly-once start yet, or the progress topic is gone)."""
    (claim,) = committed_offsets(bootstrap, owner_group(app_id), passthrough, [(progress_topic(app_id), 0)])
    return claim if claim.offset is not None and claim.metadata else None


def read_marker(
    consumer: Consumer, topic: str, partition: int, timeout_s: float = 30.0
) -> EpochMarker | None:
    """The marker committed for (topic, partition) in the consumer's group, waiting for pending transactions.

    A read_committed consumer asks for stable offsets, so a transaction still completing is waited for rather
    than read as absent.

    Raises:
        KafkaException: the fetch failed after the client's own retries.
    """
    found = consumer.committed([TopicPartition(topic, partition)], timeout=timeout_s)
    if not found or found[0].error is not None:
        if found and found[0].error is not None:
            raise KafkaException(found[0].error)
        return None
    return EpochMarker.parse(found[0].metadata)
