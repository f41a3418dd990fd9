"""Topic administration over the Kafka admin API: create, list, describe and delete topics.

What `ethereal-kafka topics create|list|describe|delete` runs (the broker jars carry no kafka-topics tool). Each
call builds its own admin client from `bootstrap` and the librdkafka `settings` that reach the cluster (security),
waits a bounded time, and names the topic and the cluster in every error. Callers reach the cluster first
(`reach.reach`), so a cluster that is not there fails in about a second instead of inside these calls' retries.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic, OffsetSpec, ResourceType

from ethereal_kafka.connectors.kafka.clients import admin_client, cluster_metadata, with_retries
from ethereal_kafka.connectors.kafka.errors import TopicError
from ethereal_kafka.errors import KafkaConnectionError

#: How long a created or deleted topic may take to show (or vanish) in the cluster's metadata.
SETTLE_S = 30.0


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as `topics describe` shows it.

    Attributes:
        leader: The leader's broker id (-1: none).
        replicas: Broker ids holding a replica; `isr` those in sync.
        earliest: The first offset still retained.
        end: The high watermark: the offset the next record will get (what a read_uncommitted reader reaches).
        stable: The last stable offset: what a read_committed reader reaches (below `end` while a transaction is
            open on the partition).
    """

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    earliest: int
    end: int
    stable: int


@dataclass(frozen=True)
class TopicInfo:
    """A topic as `topics describe` shows it.

    Attributes:
        configs: The settings made on the topic itself (its overrides of the broker defaults); a sensitive
            value is None.
    """

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str | None]

    @property
    def replication_factor(self) -> int:
        """Replicas per partition (of the first partition; 0 for a topic without partitions)."""
        return len(self.partitions[0].replicas) if self.partitions else 0

    def to_json(self) -> dict[str, Any]:
        """`{"topic", "partitions": [{"partition", "leader", "replicas", "isr", "earliest", "end", "stable"}],
        "replication_factor", "configs"}`."""
        return {
            "topic": self.name,
            "replication_factor": self.replication_factor,
            "configs": dict(self.configs),
            "partitions": [
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "earliest": p.earliest,
                    "end": p.end,
                    "stable": p.stable,
                }
                for p in self.partitions
            ],
        }


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = -1,
    replication_factor: int = -1,
    config: Mapping[str, str] | None = None,
    settings: Mapping[str, str] | None = None,
    if_not_exists: bool = False,
) -> tuple[bool, int]:
    """Create topic `name` and wait until the cluster's metadata shows all its partitions.

    Args:
        partitions, replication_factor: -1 takes the broker's defaults (`num.partitions`,
            `default.replication.factor`).
        config: Topic settings (`cleanup.policy=compact`, `retention.ms`, ...).
        if_not_exists: An existing topic is no error (it is left as it is).

    Returns:
        (created, the topic's partition count): `created` is False when it existed and `if_not_exists`.

    Raises:
        TopicError: the topic exists (without `if_not_exists`), or the broker refused the request.
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    admin = admin_client(bootstrap, settings)
    request = NewTopic(name, partitions, replication_factor, config=dict(config or {}))
    future = admin.create_topics([request], request_timeout=SETTLE_S)[name]
    created = True
    try:
        future.result(timeout=SETTLE_S + 5)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise TopicError(f"cannot create topic {name} at {bootstrap}: {error.str()}") from exc
        if not if_not_exists:
            raise TopicError(f"topic {name} already exists at {bootstrap}") from exc
        created = False
    deadline = time.monotonic() + SETTLE_S
    while True:
        found = cluster_metadata(admin, bootstrap).topics.get(name)
        count = len(found.partitions) if found is not None and found.error is None else 0
        if count and (not created or count >= partitions):  # partitions -1: the broker's default count
            return created, count
        if time.monotonic() > deadline:
            raise KafkaConnectionError(f"topic {name} did not appear at {bootstrap} within {SETTLE_S:g} s")
        time.sleep(0.1)


def topic_names(bootstrap: str, settings: Mapping[str, str] | None = None) -> list[str]:
    """Every topic of the cluster, sorted (internal ones included: the caller decides what to show).

    Raises:
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    return sorted(cluster_metadata(admin_client(bootstrap, settings), bootstrap).topics)


def describe_topic(bootstrap: str, name: str, settings: Mapping[str, str] | None = None) -> TopicInfo:
    """Partitions (leader, replicas, in-sync replicas, earliest, end and last stable offsets) and the settings
    made on topic `name`.

    Raises:
        TopicError: the topic does not exist.
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    admin = admin_client(bootstrap, settings)
    found = cluster_metadata(admin, bootstrap).topics.get(name)
    if found is None or found.error is not None:
        raise TopicError(f"topic {name} does not exist at {bootstrap}")
    numbers = sorted(found.partitions)
    tps = [TopicPartition(name, p) for p in numbers]
    earliest = _offsets(admin, tps, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED, bootstrap)
    end = _offsets(admin, tps, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED, bootstrap)
    stable = _offsets(admin, tps, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED, bootstrap)
    partitions = tuple(
        PartitionInfo(
            p,
            found.partitions[p].leader,
            tuple(found.partitions[p].replicas),
            tuple(found.partitions[p].isrs),
            earliest[p],
            end[p],
            stable[p],
        )
        for p in numbers
    )
    return TopicInfo(name, partitions, _topic_configs(admin, name, bootstrap))


def end_offsets(
    bootstrap: str, topics: list[str], settings: Mapping[str, str] | None = None
) -> dict[str, dict[int, int]]:
    """The high watermark of every partition of `topics` (the offset the next record of each will get):
    `{topic: {partition: offset}}`, from one metadata request per topic and one offsets request per broker. A topic
    that does not exist is left out.

    Raises:
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    admin = admin_client(bootstrap, settings)
    tps: list[TopicPartition] = []
    for topic in sorted(set(topics)):
        listed = _topic_metadata(admin, topic, bootstrap)
        if listed is not None and listed.error is None:
            tps += [TopicPartition(topic, p) for p in sorted(listed.partitions)]
    return high_watermarks(admin, tps, bootstrap)


def high_watermarks(
    admin: Any, tps: list[TopicPartition], bootstrap: str, timeout_s: float = SETTLE_S
) -> dict[str, dict[int, int]]:
    """The high watermark of each of `tps`, `{topic: {partition: offset}}`, in one offsets request per broker,
    asked again while the cluster answers with a retriable error (a leader that moved) for about `timeout_s`.

    Raises:
        KafkaConnectionError: no answer within about `timeout_s`.
    """
    if not tps:
        return {}

    def ask() -> dict[str, dict[int, int]]:
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in tps},
            isolation_level=IsolationLevel.READ_UNCOMMITTED,
            request_timeout=timeout_s,
        )
        found: dict[str, dict[int, int]] = {}
        for tp, future in futures.items():
            found.setdefault(tp.topic, {})[tp.partition] = future.result(timeout=timeout_s + 5).offset
        return found

    topics = ", ".join(sorted({tp.topic for tp in tps}))
    return with_retries(f"end offsets of {topics}", bootstrap, ask, deadline_s=timeout_s)


def _topic_metadata(admin: Any, topic: str, bootstrap: str) -> Any:
    """The metadata of one topic (None when the cluster does not know it), with bounded retries."""
    found = with_retries(
        f"metadata of {topic}", bootstrap, lambda: admin.list_topics(topic=topic, timeout=10)
    )
    return found.topics.get(topic)


def delete_topic(
    bootstrap: str, name: str, settings: Mapping[str, str] | None = None, if_exists: bool = False
) -> bool:
    """Delete topic `name` and wait until the cluster's metadata no longer shows it; False when it did not exist
    and `if_exists`.

    Raises:
        TopicError: the topic does not exist (without `if_exists`), or the broker refused the deletion.
        KafkaConnectionError: the cluster did not answer after bounded retries.
    """
    admin = admin_client(bootstrap, settings)
    future = admin.delete_topics([name], request_timeout=SETTLE_S)[name]
    try:
        future.result(timeout=SETTLE_S + 5)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise TopicError(f"cannot delete topic {name} at {bootstrap}: {error.str()}") from exc
        if not if_exists:
            raise TopicError(f"topic {name} does not exist at {bootstrap}") from exc
        return False
    deadline = time.monotonic() + SETTLE_S
    while name in cluster_metadata(admin, bootstrap).topics:
        if time.monotonic() > deadline:
            raise KafkaConnectionError(
                f"topic {name} is still listed at {bootstrap} {SETTLE_S:g} s after deletion"
            )
        time.sleep(0.1)
    return True


def _offsets(
    admin: Any, tps: list[TopicPartition], spec: OffsetSpec, isolation: IsolationLevel, bootstrap: str
) -> dict[int, int]:
    if not tps:
        return {}
    futures = admin.list_offsets(
        {tp: spec for tp in tps}, isolation_level=isolation, request_timeout=SETTLE_S
    )
    try:
        return {tp.partition: future.result(timeout=SETTLE_S + 5).offset for tp, future in futures.items()}
    except KafkaException as exc:
        raise KafkaConnectionError(
            f"offsets of {tps[0].topic} at {bootstrap}: {exc.args[0].str() if exc.args else exc}"
        ) from exc


def _topic_configs(admin: Any, name: str, bootstrap: str) -> dict[str, str | None]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    try:
        entries = admin.describe_configs([resource], request_timeout=SETTLE_S)[resource].result(
            timeout=SETTLE_S + 5
        )
    except KafkaException as exc:
        raise KafkaConnectionError(
            f"settings of {name} at {bootstrap}: {exc.args[0].str() if exc.args else exc}"
        ) from exc
    return {
        key: None if entry.is_sensitive else entry.value
        for key, entry in sorted(entries.items())
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }
