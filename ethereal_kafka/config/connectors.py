"""Configuration models of the Kafka source and sink connectors (one `.properties` file each)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import ClassVar

from ethereal_kafka.config.model import Model, non_negative, positive, setting
from ethereal_kafka.errors import ConfigError

FORMATS = ("bytes", "string", "json", "avro")
ERROR_POLICIES = ("fail", "skip", "dlq")
#: The columns of every Kafka record a source reads (`connectors.kafka.range_reader.KAFKA_ARROW_SCHEMA`).
METADATA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestamp_type", "headers")
_START = re.compile(r"^(group-offsets|earliest|latest|timestamp:\d+|[^,:\s]+:\d+:\d+(,[^,:\s]+:\d+:\d+)*)$")


#: librdkafka settings the framework sets itself on the clients the exactly-once protocol depends on: passed through
#: as `kafka.*`, each would weaken a guarantee silently (read uncommitted markers and claims, a transaction timeout
#: the epoch bounds were not checked against, shared or lost transactional ids, auto-committed offsets, a producer
#: that is not idempotent). The value says what to set instead.
PROTOCOL_SETTINGS = {
    "isolation.level": "the source's isolation.level key (markers and claims are always read read_committed)",
    "transaction.timeout.ms": "the job's transaction.timeout.ms",
    "transactional.id": "nothing: transactional ids are derived from app.id, query and task",
    "enable.idempotence": "nothing: sinks are idempotent and transactional",
    "acks": "nothing: sinks write with acks=all",
    "enable.auto.commit": "nothing: offsets are committed with their epochs",
    "group.id": "the source's group.id key",
}


def _starting_offsets(value: str) -> str | None:
    if _START.match(value):
        return None
    return "expected group-offsets, earliest, latest, timestamp:<ms> or topic:partition:offset[,...]"


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class SerdeSettings(Model):
    """Key and value formats shared by source and sink (see `ethereal_kafka.serde`), and the `kafka.*` pass-through
    settings of every Kafka connector."""

    def validate(self) -> None:
        """Refuse `kafka.*` settings the exactly-once protocol sets itself (`PROTOCOL_SETTINGS`)."""
        for key, instead in PROTOCOL_SETTINGS.items():
            if key in self.passthrough:
                raise ConfigError(
                    f"kafka.{key}: set by ethereal-kafka itself (a pass-through value would weaken exactly-once); "
                    f"use {instead}"
                )

    key_format: str = setting("bytes", key="key.format", doc="key format", choices=FORMATS)
    value_format: str = setting("bytes", key="value.format", doc="value format", choices=FORMATS)
    key_schema: str | None = setting(None, key="key.schema", doc="JSON: Spark DDL of the key's fields")
    value_schema: str | None = setting(None, key="value.schema", doc="JSON: Spark DDL of the value's fields")
    key_schema_file: str | None = setting(None, key="key.schema.file", doc="Avro: local .avsc for the key")
    value_schema_file: str | None = setting(
        None, key="value.schema.file", doc="Avro: local .avsc for the value"
    )
    key_fields_prefix: str = setting(
        "key_", key="key.fields.prefix", doc="source: prefix of the columns decoded from a json/avro key"
    )
    value_fields_prefix: str = setting(
        "", key="value.fields.prefix", doc="source: prefix of the columns decoded from a json/avro value"
    )
    schema_registry_url: str | None = setting(
        None, key="schema.registry.url", doc="Avro: Confluent-compatible schema registry (wire format)"
    )


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class KafkaSourceConfig(SerdeSettings):
    """The Kafka source connector (`connector.class=kafka-source`)."""

    SECTION: ClassVar[str] = "kafka source"
    PASSTHROUGH_PREFIX: ClassVar[str | None] = "kafka."

    connector_class: str = setting(
        "kafka-source", key="connector.class", doc="connector type", choices=("kafka-source",)
    )
    name: str = setting("source", key="name", doc="connector name (used in metrics and ids)")
    bootstrap_servers: str = setting(key="bootstrap.servers", doc="Kafka bootstrap servers")
    topics: tuple[str, ...] = setting((), key="topics", doc="comma-separated topics to read")
    topic_pattern: str | None = setting(None, key="topic.pattern", doc="regular expression of topics to read")
    group_id: str | None = setting(
        None, key="group.id", doc="consumer group holding the job's offsets (default: the job's app.id)"
    )
    checkpoint_location: str | None = setting(
        None, key="checkpoint.location", doc="set by the job runner: pins the initial offsets of a checkpoint"
    )
    starting_offsets: str = setting(
        "group-offsets",
        key="starting.offsets",
        check=_starting_offsets,
        doc="group-offsets | earliest | latest | timestamp:<ms> | topic:partition:offset,...",
    )
    ending_offsets: str | None = setting(
        None,
        key="ending.offsets",
        doc="set by `ethereal-kafka shadow`: topic:partition:offset,... where the source stops (exclusive); a "
        "partition not named reads nothing",
    )
    group_starting_offsets: str | None = setting(
        None,
        key="restore.starts.by.group",
        doc="set by the job runner for a restore whose queries stood at different offsets of a partition: JSON "
        "{consumer group: starting.offsets}, each query (its own group) starting where it stood",
    )
    group_offsets_reset: str = setting(
        "earliest",
        key="group.offsets.reset",
        choices=("earliest", "latest"),
        doc="where a partition without a committed group offset starts",
    )
    isolation_level: str = setting(
        "read_committed",
        key="isolation.level",
        choices=("read_committed", "read_uncommitted"),
        doc="read only committed transactional records (default) or everything",
    )
    max_records_per_epoch: int = setting(
        0,
        key="max.records.per.epoch",
        check=non_negative,
        doc="admission control: at most N offsets per epoch (0: under exactly-once with fixed epoch sizing bounded "
        "from the transaction timeout, at most 50000; with adaptive sizing the job's epoch.max.records; else "
        "unbounded)",
    )
    max_bytes_per_epoch: int = setting(
        0,
        key="max.bytes.per.epoch",
        check=non_negative,
        doc="admission control: at most about N bytes per epoch, from the measured record size (0: under "
        "exactly-once with fixed epoch sizing bounded from the transaction timeout, at most 33554432; with "
        "adaptive sizing 67108864; else unbounded)",
    )
    epoch_sizing: str = setting(
        "fixed",
        key="epoch.sizing",
        choices=("fixed", "adaptive"),
        doc="set by the job runner from the job's epoch.sizing: adaptive = admit the per-epoch budget the job's "
        "epoch sizer posts in the checkpoint (never more than max.records.per.epoch)",
    )
    partition_discovery_interval_ms: int = setting(
        5000,
        key="partition.discovery.interval.ms",
        check=non_negative,
        doc="how often epoch planning looks for new partitions and topics (0: every epoch)",
    )
    batch_size: int = setting(10000, key="arrow.batch.size", check=positive, doc="records per Arrow batch")
    read_timeout_ms: int = setting(
        120000,
        key="read.timeout.ms",
        check=positive,
        doc="give up a task that makes no progress for this long",
    )
    on_error: str = setting("fail", key="on.error", choices=ERROR_POLICIES, doc="poison record policy")
    dlq_topic: str | None = setting(None, key="dlq.topic", doc="dead-letter topic (policy dlq)")
    dlq_delivery: str = setting(
        "producer",
        key="dlq.delivery",
        choices=("producer", "epoch"),
        doc="set by the job runner: dead letters sent by the read task (producer), or committed with their epoch "
        "under exactly-once (epoch)",
    )
    metadata_columns: tuple[str, ...] = setting(
        (),
        key="metadata.columns",
        doc="DataStream API: Kafka columns the pipeline sees beside the decoded key and value (comma-separated "
        "of key, value, topic, partition, offset, timestamp, timestamp_type, headers; * = all)",
    )
    pin_tables: str | None = setting(
        None,
        key="pin.tables",
        secret=True,
        doc="set by the compiler: the global tables (JSON) whose end offsets each epoch records for lookup joins",
    )

    @property
    def group(self) -> str:
        """The consumer group: `group.id`, else `ethereal-kafka` (a job sets it to its app.id)."""
        return self.group_id or "ethereal-kafka"

    def pipeline_columns(self, columns: Sequence[str]) -> list[str]:
        """Of a source's `columns` (the Kafka columns, then the decoded ones), those a DataStream pipeline sees as
        fields, in order: the record's payload, plus the Kafka columns listed in `metadata.columns`.

        The payload is the value's decoded fields (json/avro), else the `value` column (bytes/string); and the key's
        decoded fields (json/avro, prefixed `key.fields.prefix`), else the `key` column when it is a string, or
        when the value is not decoded into fields (a raw key beside a raw value, as Kafka Streams hands them). So a
        JSON value with the default bytes key gives exactly the value's fields; topic, partition, offset,
        timestamp, timestamp_type, headers and the raw bytes of a decoded key or value are metadata.
        """
        wanted = set(METADATA_COLUMNS) if "*" in self.metadata_columns else set(self.metadata_columns)
        value_decoded = self.value_format in ("json", "avro") and any(
            c not in METADATA_COLUMNS for c in columns
        )
        if not value_decoded:
            wanted.add("value")
        if self.key_format == "string" or (self.key_format == "bytes" and not value_decoded):
            wanted.add("key")
        return [c for c in columns if c in wanted or c not in METADATA_COLUMNS]

    def starting_offsets_of_group(self) -> str:
        """Where a query reading this source with a fresh checkpoint starts: its group's entry of
        `restore.starts.by.group` when that is set, else `starting.offsets`.

        Raises:
            ConfigError: `restore.starts.by.group` is set and does not name this source's group (a query the restored
                savepoint does not hold reads a partition its queries read up to different offsets).
        """
        if self.group_starting_offsets is None:
            return self.starting_offsets
        starts = json.loads(self.group_starting_offsets)
        if self.group not in starts:
            raise ConfigError(
                f"source {self.name}, consumer group {self.group}: the restored savepoint's queries read this source "
                f"up to different offsets, each starts where it stood ({', '.join(sorted(starts))}), and no query "
                "of the savepoint read it with this group (a query renamed or added); keep the query names, or take "
                "the savepoint once the queries read the same input"
            )
        return str(starts[self.group])

    def ends(self) -> dict[tuple[str, int], int] | None:
        """`ending.offsets` as `{(topic, partition): offset}`; None when the source is not bounded."""
        if self.ending_offsets is None:
            return None
        ends: dict[tuple[str, int], int] = {}
        for item in filter(None, self.ending_offsets.split(",")):
            topic, partition, offset = item.rsplit(":", 2)
            ends[(topic, int(partition))] = int(offset)
        return ends

    def reads(self, topic: str) -> bool:
        """True when this source reads `topic` (listed, or matching `topic.pattern`)."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics

    def validate(self) -> None:
        """Exactly one of `topics` / `topic.pattern`; a dead-letter topic with policy dlq; no protocol-owned
        `kafka.*` setting."""
        super().validate()
        if bool(self.topics) == bool(self.topic_pattern):
            raise ConfigError("kafka source: set exactly one of topics or topic.pattern")
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                raise ConfigError(f"topic.pattern={self.topic_pattern!r}: {exc}") from exc
        if self.on_error == "dlq" and not self.dlq_topic:
            raise ConfigError("kafka source: on.error=dlq needs dlq.topic")
        unknown = [c for c in self.metadata_columns if c != "*" and c not in METADATA_COLUMNS]
        if unknown:
            raise ConfigError(
                f"metadata.columns: unknown column(s) {', '.join(unknown)} (choose from {', '.join(METADATA_COLUMNS)} or *)"
            )


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class KafkaSinkConfig(SerdeSettings):
    """The Kafka sink connector (`connector.class=kafka-sink`)."""

    SECTION: ClassVar[str] = "kafka sink"
    PASSTHROUGH_PREFIX: ClassVar[str | None] = "kafka."

    connector_class: str = setting(
        "kafka-sink", key="connector.class", doc="connector type", choices=("kafka-sink",)
    )
    name: str = setting("sink", key="name", doc="connector name (part of transactional ids)")
    bootstrap_servers: str = setting(key="bootstrap.servers", doc="Kafka bootstrap servers")
    topic: str | None = setting(None, key="topic", doc="target topic; else each row's `topic` column")
    key_column: str = setting("key", key="key.column", doc="column serialized as the record key")
    value_column: str = setting(
        "value", key="value.column", doc="column serialized as the value (or * = row)"
    )
    flush_timeout_ms: int = setting(
        60000, key="flush.timeout.ms", check=positive, doc="how long a task waits for delivery reports"
    )


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class KafkaTableConfig(SerdeSettings):
    """A global table (`connector.class=kafka-table`): a compacted topic that lookup joins read by key.

    Each executor keeps a copy in RocksDB, read up to the table offsets recorded for the epoch (see
    `ethereal_kafka.connectors.table`). The value decodes into the table's fields (json/avro), or one field `value`
    (string/bytes); a record with a null value (a tombstone) deletes its key.
    """

    SECTION: ClassVar[str] = "kafka table"
    PASSTHROUGH_PREFIX: ClassVar[str | None] = "kafka."

    connector_class: str = setting(
        "kafka-table", key="connector.class", doc="connector type", choices=("kafka-table",)
    )
    name: str = setting("table", key="name", doc="table name (what join_table refers to)")
    bootstrap_servers: str = setting(key="bootstrap.servers", doc="Kafka bootstrap servers")
    topic: str = setting(key="topic", doc="the compacted topic holding the table")
    isolation_level: str = setting(
        "read_committed",
        key="isolation.level",
        choices=("read_committed", "read_uncommitted"),
        doc="read only committed transactional records (default) or everything",
    )
    on_error: str = setting(
        "fail", key="on.error", choices=("fail", "skip"), doc="a table record that fails to decode"
    )
    store_dir: str | None = setting(
        None,
        key="store.dir",
        doc="where executors keep their RocksDB copies (default: <tmp>/ethereal-kafka/tables/<app.id>)",
    )
    read_timeout_ms: int = setting(
        120000,
        key="read.timeout.ms",
        check=positive,
        doc="give up catching up with the table when no progress is made for this long",
    )
    batch_size: int = setting(
        10000, key="arrow.batch.size", check=positive, doc="table records decoded per batch"
    )
