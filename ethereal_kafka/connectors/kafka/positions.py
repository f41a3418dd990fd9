"""Driver-side discovery of topic-partitions and resolution of start and end positions.

Used by the stream reader on the driver only: `initialOffset` (start positions) and `latestOffset` (end offsets of
the next epoch). Executors never call these. Planning an epoch costs one ListOffsets request for all partitions;
the cluster's metadata is asked for again only every `partition.discovery.interval.ms` (new partitions and topics
matching a pattern are found then).
"""

from __future__ import annotations

import re
import time

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.clients import (
    admin_client,
    cluster_metadata,
    consumer_config,
    new_consumer,
    with_retries,
)
from ethereal_kafka.connectors.kafka.offsets import TopicPartitionKey
from ethereal_kafka.errors import ConfigError


class PositionResolver:
    """Answers "which partitions exist" and "where does each start / end" for one source configuration."""

    def __init__(self, config: KafkaSourceConfig) -> None:
        self.config = config
        self._admin = admin_client(config.bootstrap_servers, config.passthrough)
        self._consumer: Consumer | None = None
        self._partitions: list[TopicPartitionKey] | None = None
        self._discovered_at = 0.0

    @property
    def consumer(self) -> Consumer:
        """A metadata-only consumer in the job's group (never subscribes, never commits by itself)."""
        if self._consumer is None:
            conf = consumer_config(
                self.config.bootstrap_servers,
                self.config.group,
                self.config.isolation_level,
                self.config.passthrough,
            )
            self._consumer = new_consumer(conf)
        return self._consumer

    def close(self) -> None:
        """Release the clients; the resolver is not used afterwards."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def topic_partitions(self) -> list[TopicPartitionKey]:
        """Partitions of the configured topics (or of the topics matching the pattern), sorted: as of the last
        discovery, which is at most `partition.discovery.interval.ms` old.

        Raises:
            ConfigError: a listed topic does not exist.
            KafkaConnectionError: the cluster did not answer after bounded retries.
        """
        interval_s = self.config.partition_discovery_interval_ms / 1000
        if self._partitions is None or time.monotonic() - self._discovered_at >= interval_s:
            self._partitions = self._discover()
            self._discovered_at = time.monotonic()
        return list(self._partitions)

    def _discover(self) -> list[TopicPartitionKey]:
        metadata = cluster_metadata(self._admin, self.config.bootstrap_servers)
        if self.config.topic_pattern is not None:
            pattern = re.compile(self.config.topic_pattern)
            names = [t for t in metadata.topics if pattern.fullmatch(t) and not t.startswith("__")]
        else:
            missing = [t for t in self.config.topics if t not in metadata.topics]
            if missing:
                raise ConfigError(
                    f"source {self.config.name}: topic(s) {', '.join(missing)} do not exist "
                    f"on {self.config.bootstrap_servers}"
                )
            names = list(self.config.topics)
        return sorted((t, p) for t in names for p in metadata.topics[t].partitions)

    def latest(self, tps: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """End offsets now (the last stable offset for read_committed), in one request."""
        return self._list_offsets(tps, OffsetSpec.latest(), "end offsets")

    def earliest(self, tps: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The earliest retained offsets now, in one request."""
        return self._list_offsets(tps, OffsetSpec.earliest(), "earliest offsets")

    def _list_offsets(
        self, tps: list[TopicPartitionKey], spec: OffsetSpec, what: str
    ) -> dict[TopicPartitionKey, int]:
        if not tps:
            return {}
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self.config.isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )

        def query() -> dict[TopicPartitionKey, int]:
            futures = self._admin.list_offsets(
                {TopicPartition(t, p): spec for t, p in tps}, isolation_level=isolation, request_timeout=10.0
            )
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}

        return with_retries(f"{what} of {len(tps)} partition(s)", self.config.bootstrap_servers, query)

    def at_timestamp(self, tps: list[TopicPartitionKey], timestamp_ms: int) -> dict[TopicPartitionKey, int]:
        """The first offset whose timestamp is >= `timestamp_ms`, or the end offset when there is none."""
        query = [TopicPartition(t, p, timestamp_ms) for t, p in tps]
        found = with_retries(
            "offsets-for-times query",
            self.config.bootstrap_servers,
            lambda: self.consumer.offsets_for_times(query, timeout=10.0),
        )
        ends = self.latest(tps)
        return {
            (tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else ends[(tp.topic, tp.partition)])
            for tp in found
        }

    def committed(self, tps: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The job group's committed offsets; partitions without one start per `group.offsets.reset`.

        A partition whose committed offset could not be read (a per-partition error: a coordinator loading, a
        timeout) is retried like a failed request, never taken for "nothing committed": that would restart it from
        `group.offsets.reset` and reprocess (or skip) everything.

        Raises:
            KafkaConnectionError: the offsets could not be read within the bounded retries.
        """
        query = [TopicPartition(t, p) for t, p in tps]

        def fetch() -> list[TopicPartition]:
            found: list[TopicPartition] = self.consumer.committed(query, timeout=10.0)
            for tp in found:
                if tp.error is not None:
                    raise KafkaException(tp.error)
            return found

        found = with_retries(
            f"committed offsets of group {self.config.group}", self.config.bootstrap_servers, fetch
        )
        have = {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}
        lacking = [tp for tp in tps if tp not in have]
        if lacking:
            fallback = (
                self.earliest(lacking)
                if self.config.group_offsets_reset == "earliest"
                else self.latest(lacking)
            )
            have.update(fallback)
        return have

    def initial(self) -> dict[TopicPartitionKey, int]:
        """Start positions for a query with no Spark checkpoint, per `starting.offsets` (or its group's entry of
        `restore.starts.by.group`)."""
        tps = self.topic_partitions()
        how = self.config.starting_offsets_of_group()
        if how == "group-offsets":
            return self.committed(tps)
        if how == "earliest":
            return self.earliest(tps)
        if how == "latest":
            return self.latest(tps)
        if how.startswith("timestamp:"):
            return self.at_timestamp(tps, int(how.split(":", 1)[1]))
        return self._explicit(tps, how)

    def _explicit(self, tps: list[TopicPartitionKey], spec: str) -> dict[TopicPartitionKey, int]:
        given: dict[TopicPartitionKey, int] = {}
        for item in spec.split(","):
            topic, partition, offset = item.rsplit(":", 2)
            given[(topic, int(partition))] = int(offset)
        unknown = sorted(set(given) - set(tps))
        if unknown:
            raise ConfigError(
                f"starting.offsets names partition(s) the source does not read: "
                f"{', '.join(f'{t}:{p}' for t, p in unknown)}"
            )
        lacking = [tp for tp in tps if tp not in given]
        # Partitions the explicit list leaves out start from the earliest retained offset.
        return {**self.earliest(lacking), **given} if lacking else given
