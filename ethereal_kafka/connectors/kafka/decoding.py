"""Turn raw Kafka columns into the source's output rows: deserialize key and value, apply the poison policy.

`SourceLayout` (a frozen definition, built on the driver) fixes the output columns; `RecordDecoder` (built from it
on an executor) decodes Arrow batches of raw records. A record whose key or value fails to deserialize is, per
`on.error`:
- `fail`: the task raises `SerdeError` naming topic, partition and offset (the query stops);
- `skip`: dropped and counted;
- `dlq`: sent, raw, to the dead-letter topic with headers naming the error and its origin, then dropped; under
  exactly-once the dead letters are kept and committed with their epoch instead (`eos.dead_letters`).

Columns: the Kafka columns (`key`, `value`, `topic`, `partition`, `offset`, `timestamp`, `timestamp_type`,
`headers`); with `string` format `key`/`value` are strings; with `json`/`avro` the raw bytes stay in `key`/`value`
and the decoded fields are added as columns, prefixed by `key.fields.prefix` / `value.fields.prefix`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from confluent_kafka import KafkaError, Message

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.clients import cached_producer, drop_producer, producer_config
from ethereal_kafka.connectors.kafka.dead_letters import DeadLetter, dead_letters_of
from ethereal_kafka.connectors.kafka.range_reader import KAFKA_ARROW_SCHEMA
from ethereal_kafka.errors import ConfigError, KafkaConnectionError
from ethereal_kafka.serde import Codec, SerdeError, SerdeSpec, build_codec, pin_schema


@dataclass(frozen=True)
class SourceLayout:
    """The output columns of one source and how to produce them (picklable; shipped to executors)."""

    config: KafkaSourceConfig
    key: SerdeSpec
    value: SerdeSpec
    schema: pa.Schema = field(compare=False)

    @classmethod
    def from_config(cls, config: KafkaSourceConfig) -> SourceLayout:
        """Resolve the serde specs (this may read `.avsc` files or ask the registry) and fix the columns.

        Raises:
            ConfigError: a decoded column would shadow a Kafka column or another decoded column.
        """
        key = pin_schema(SerdeSpec.from_settings(config, "key"))
        value = pin_schema(SerdeSpec.from_settings(config, "value"))
        fields = list(KAFKA_ARROW_SCHEMA)
        for spec, prefix in ((key, config.key_fields_prefix), (value, config.value_fields_prefix)):
            arrow_type = build_codec(spec).arrow_type()
            index = fields.index(KAFKA_ARROW_SCHEMA.field(spec.field))
            if spec.format == "string":
                fields[index] = pa.field(spec.field, pa.string())
            elif pa.types.is_struct(arrow_type):
                names = {f.name for f in fields}
                for sub in arrow_type:
                    name = f"{prefix}{sub.name}"
                    if name in names:
                        raise ConfigError(
                            f"source {config.name}: decoded {spec.field} field {sub.name!r} would be column {name!r}, "
                            f"which exists already; set {spec.field}.fields.prefix"
                        )
                    fields.append(pa.field(name, sub.type, nullable=True))
        return cls(config, key, value, pa.schema(fields))

    def spark_schema(self) -> object:
        """The output columns as a Spark StructType (no JVM needed)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(self.schema)

    def build(self) -> RecordDecoder:
        """The executor-side decoder."""
        return RecordDecoder(self)


@dataclass
class DecodeStats:
    """What one read task did with its records."""

    records: int = 0
    skipped: int = 0
    dead_lettered: int = 0


class RecordDecoder:
    """Decodes raw Arrow batches for one task; sends poison records to the dead-letter topic.

    Lifecycle: `decode()` per batch, then `finish()` once, which flushes dead-letter records; a task must not report
    success before `finish()` returned.
    """

    def __init__(self, layout: SourceLayout) -> None:
        self.layout = layout
        self.config = layout.config
        self.key_codec: Codec = build_codec(layout.key)
        self.value_codec: Codec = build_codec(layout.value)
        self.stats = DecodeStats()
        self._dlq_conf = producer_config(self.config.bootstrap_servers, self.config.passthrough)
        self._dlq_failures: list[str] = []
        #: Dead letters kept for their epoch's commit (`dlq.delivery=epoch`).
        self.letters: list[DeadLetter] = []

    def decode(self, raw: pa.RecordBatch) -> pa.RecordBatch:
        """Decode one batch of `KAFKA_ARROW_SCHEMA` rows into `layout.schema` rows, minus poison records.

        Raises:
            SerdeError: a record failed and the policy is `fail`.
        """
        n = raw.num_rows
        self.stats.records += n
        topics = raw.column("topic").to_pylist()
        partitions = raw.column("partition").to_pylist()
        offsets = raw.column("offset").to_pylist()
        decoded: dict[str, pa.Array] = {}
        errors: dict[int, SerdeError] = {}
        for name, codec in (("key", self.key_codec), ("value", self.value_codec)):
            if codec.spec.format == "bytes":
                continue
            result = codec.decode(raw.column(name), topics, partitions, offsets)
            decoded[name] = result.values
            for row, error in result.errors.items():
                errors.setdefault(row, error)
        columns: list[pa.Array] = []
        for f in self.layout.schema:
            if f.name in ("key", "value") and f.name in decoded and pa.types.is_string(f.type):
                columns.append(decoded[f.name])
            elif f.name in KAFKA_ARROW_SCHEMA.names:
                columns.append(raw.column(f.name))
        for name, prefix in (
            ("key", self.config.key_fields_prefix),
            ("value", self.config.value_fields_prefix),
        ):
            values = decoded.get(name)
            if values is not None and pa.types.is_struct(values.type):
                for i, sub in enumerate(values.type):
                    if f"{prefix}{sub.name}" in self.layout.schema.names:
                        columns.append(values.field(i))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.layout.schema)
        if not errors:
            return batch
        self._handle_poison(raw, errors)
        keep = pa.array([i not in errors for i in range(n)])
        return batch.filter(keep)

    def _handle_poison(self, raw: pa.RecordBatch, errors: dict[int, SerdeError]) -> None:
        if self.config.on_error == "fail":
            row = min(errors)
            raise errors[row]
        if self.config.on_error == "skip":
            self.stats.skipped += len(errors)
            return
        letters = dead_letters_of(raw, errors)
        self.stats.dead_lettered += len(letters)
        if self.config.dlq_delivery == "epoch":
            self.letters.extend(letters)  # committed with the epoch (see `eos.dead_letters`)
            return
        producer = cached_producer(self._dlq_conf)

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                self._dlq_failures.append(err.str())

        for letter in letters:
            while True:
                try:
                    producer.produce(
                        str(self.config.dlq_topic),
                        key=letter.key,
                        value=letter.value,
                        headers=list(letter.headers),
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)

    def finish(self) -> DecodeStats:
        """Flush dead-letter records; returns the task's counts.

        Raises:
            KafkaConnectionError: a dead-letter record was not acknowledged (the task fails and is retried).
        """
        if self.stats.dead_lettered and self.config.dlq_delivery != "epoch":
            producer = cached_producer(self._dlq_conf)
            remaining = producer.flush(60)
            if remaining or self._dlq_failures:
                drop_producer(self._dlq_conf)
                raise KafkaConnectionError(
                    f"dead-letter topic {self.config.dlq_topic}: {remaining} unacknowledged, "
                    f"failures {sorted(set(self._dlq_failures))[:3]}"
                )
        return self.stats


def decode_batches(
    layout: SourceLayout,
    batches: Iterator[pa.RecordBatch],
    on_finish: Callable[[DecodeStats, list[DeadLetter]], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Decode every raw batch of a task and flush the dead-letter topic at the end; then hand the task's counts and
    the dead letters kept for the epoch (`dlq.delivery=epoch`) to `on_finish` (not called when the task fails)."""
    decoder = layout.build()
    for raw in batches:
        out = decoder.decode(raw)
        if out.num_rows:
            yield out
    stats = decoder.finish()
    if on_finish is not None:
        on_finish(stats, decoder.letters)
