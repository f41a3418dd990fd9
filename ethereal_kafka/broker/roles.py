"""Which node of a Kafka cluster holds a role: a partition's leader, a transactional id's transaction coordinator, a
group's coordinator; and whether every partition is fully replicated again. Asked by failure tests that kill the
node holding a role (`LocalCluster`), answered from the cluster's own metadata over confluent-kafka's AdminClient.

confluent-kafka has no FindCoordinator call for transactional ids, so the transaction coordinator is found the way
the broker finds it: the leader of partition `abs(hash(id)) % partitions` of `__transaction_state`, with Java's
`String.hashCode` (`TransactionStateManager.partitionFor`). A group's coordinator comes from
`describe_consumer_groups`, and falls back to the same rule on `__consumer_offsets` when the group is unknown.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ethereal_kafka.errors import BrokerError

TRANSACTION_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
#: What a partition without a live leader reports as its leader.
NO_LEADER = -1


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()` of `text` (a signed 32-bit int over its UTF-16 code units)."""
    value = 0
    for unit in _utf16_units(text):
        value = (31 * value + unit) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of an internal topic (`__transaction_state`, `__consumer_offsets`) that holds `key` (a
    transactional id or a group id): Kafka's `Utils.abs(key.hashCode()) % partitions`, where `abs` maps
    `Integer.MIN_VALUE` to 0."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True)
class Health:
    """What the metadata says about a cluster's replication.

    Attributes:
        brokers: Node ids the metadata lists (registered and not fenced).
        lagging: `topic[partition]` of every partition without a leader, or whose in-sync replicas are fewer than
            its replicas (internal topics included).
    """

    brokers: frozenset[int]
    lagging: tuple[str, ...]

    def complete(self, nodes: int) -> bool:
        """True when all `nodes` brokers are listed and no partition lags."""
        return len(self.brokers) >= nodes and not self.lagging


def health(bootstrap: str, timeout_s: float = 10.0) -> Health:
    """Read the cluster's metadata (every topic) once.

    Raises:
        BrokerError: no metadata within `timeout_s`.
    """
    metadata = _metadata(bootstrap, None, timeout_s)
    lagging = [
        f"{name}[{p.id}]"
        for name, topic in metadata.topics.items()
        for p in topic.partitions.values()
        if p.leader == NO_LEADER or len(p.isrs) < len(p.replicas)
    ]
    return Health(frozenset(metadata.brokers), tuple(sorted(lagging)))


def partition_leader(bootstrap: str, topic: str, partition: int, timeout_s: float = 10.0) -> int:
    """The node id that leads `topic[partition]` (NO_LEADER when none does).

    Raises:
        BrokerError: no metadata, or the topic or partition does not exist.
    """
    found = _metadata(bootstrap, topic, timeout_s).topics.get(topic)
    if found is None or found.error is not None or partition not in found.partitions:
        raise BrokerError(f"{topic}[{partition}] is not in the metadata of {bootstrap}")
    return int(found.partitions[partition].leader)


def transaction_coordinator(bootstrap: str, transactional_id: str, timeout_s: float = 10.0) -> int:
    """The node id of the transaction coordinator of `transactional_id`: the leader of its `__transaction_state`
    partition (NO_LEADER when none leads it).

    Raises:
        BrokerError: no metadata, or `__transaction_state` does not exist yet (no transactional producer has
            initialised on the cluster).
    """
    return leader_for_key(bootstrap, TRANSACTION_STATE_TOPIC, transactional_id, timeout_s)


def group_coordinator(bootstrap: str, group: str, timeout_s: float = 10.0) -> int:
    """The node id of `group`'s coordinator, as `describe_consumer_groups` reports it; for a group the cluster
    does not answer for, the leader of its `__consumer_offsets` partition.

    Raises:
        BrokerError: neither answer came within `timeout_s`.
    """
    from confluent_kafka import KafkaException

    admin = _admin(bootstrap)
    try:
        described = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result(
            timeout=timeout_s
        )
        coordinator = getattr(described, "coordinator", None)
        if coordinator is not None and coordinator.id is not None and coordinator.id >= 0:
            return int(coordinator.id)
    except KafkaException:
        pass
    return leader_for_key(bootstrap, OFFSETS_TOPIC, group, timeout_s)


def leader_for_key(bootstrap: str, topic: str, key: str, timeout_s: float = 10.0) -> int:
    """The leader of the partition of internal `topic` (`__transaction_state`, `__consumer_offsets`) that holds
    `key` (`coordinator_partition`): the node that coordinates `key`.

    Raises:
        BrokerError: no metadata, or `topic` does not exist yet.
    """
    found = _metadata(bootstrap, topic, timeout_s).topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise BrokerError(f"{topic} is not in the metadata of {bootstrap} (not created yet)")
    partition = coordinator_partition(key, len(found.partitions))
    return int(found.partitions[partition].leader)


def _metadata(bootstrap: str, topic: str | None, timeout_s: float) -> Any:
    from confluent_kafka import KafkaException

    admin = _admin(bootstrap)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return admin.list_topics(topic, timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise BrokerError(f"no metadata from {bootstrap} within {timeout_s:.0f}s: {exc}") from exc
            time.sleep(0.2)


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 5000})


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
