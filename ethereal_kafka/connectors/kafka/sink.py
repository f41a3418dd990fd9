"""The Kafka sink (at-least-once): a `foreachBatch` writer whose Spark tasks produce Arrow batches to Kafka.

Each task sends its rows with an idempotent producer and flushes before it reports success, so when Spark records
an epoch as done every record of it is acknowledged by Kafka. A failed task is retried by Spark and may resend
records: at-least-once. The exactly-once path (transactions, epoch markers) is in `ethereal_kafka.checkpoint`.

Input columns: `value.column` (default `value`; `*` = every column but key/topic/partition/headers, as one
record) serialized per `value.format`; `key.column` (default `key`, optional) per `key.format`; `topic` (string; used
when the connector has no `topic`), `partition` (int, optional), `headers` (array<struct<key,value>>, optional).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
from confluent_kafka import KafkaError, Message

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.producers import cached_producer, drop_producer, producer_config
from ethereal_kafka.errors import ConfigError, KafkaConnectionError
from ethereal_kafka.serde import Codec, SerdeSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

RESULT_SCHEMA = "records long"


_CODECS: dict[bytes, Codec] = {}

#: Columns that steer a record and are never part of a `value.column=*` record.
_ROUTING = ("topic", "partition", "headers")


def _codec(spec: SerdeSpec) -> Codec:
    """This worker's codec for `spec` (building one may ask the schema registry; reuse it across epochs)."""
    key = pickle.dumps(spec)
    codec = _CODECS.get(key)
    if codec is None:
        codec = _CODECS[key] = spec.build()
    return codec


def _column(batch: pa.RecordBatch, name: str, exclude: tuple[str, ...]) -> pa.Array | None:
    """The named column, or for `*` every column but `exclude` as one struct column."""
    names = batch.schema.names
    if name == "*":
        rest = [n for n in names if n not in exclude]
        return pa.StructArray.from_arrays([batch.column(n) for n in rest], names=rest)
    return batch.column(names.index(name)) if name in names else None


def _encode(codec: Codec, column: pa.Array | None, topics: list[str], n: int) -> list[bytes | None]:
    """Serialize a column row by row; rows for different topics are encoded with their own topic context."""
    if column is None:
        return [None] * n
    distinct = sorted(set(topics))
    if len(distinct) == 1:
        return codec.encode(column, distinct[0])
    out: list[bytes | None] = [None] * n
    for topic in distinct:
        rows = [i for i, t in enumerate(topics) if t == topic]
        for i, encoded in zip(rows, codec.encode(column.take(pa.array(rows)), topic), strict=True):
            out[i] = encoded
    return out


def produce_arrow(
    config: KafkaSinkConfig, key_spec: SerdeSpec, value_spec: SerdeSpec, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Produce every row of `batches` and flush; yields one row with the number of records sent.

    Runs inside a Spark task (via `mapInArrow`).

    Raises:
        KafkaConnectionError: a delivery failed or was not acknowledged within `flush.timeout.ms`.
    """
    conf = producer_config(config.bootstrap_servers, config.passthrough)
    producer = cached_producer(conf)
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err.str())

    key_codec = _codec(key_spec)
    value_codec = _codec(value_spec)
    routing = (*_ROUTING, config.key_column)
    sent = 0
    for batch in batches:
        n = batch.num_rows
        names = batch.schema.names
        if config.topic:
            topics = [config.topic] * n
        elif "topic" in names:
            topics = batch.column(names.index("topic")).to_pylist()
        else:
            raise ConfigError(f"sink {config.name}: no topic configured and the stream has no topic column")
        if any(not t for t in topics):
            raise ConfigError(
                f"sink {config.name}: a row has an empty topic column and no topic is configured"
            )
        keys = _encode(key_codec, _column(batch, config.key_column, ()), topics, n)
        values = _encode(value_codec, _column(batch, config.value_column, routing), topics, n)
        partitions = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
        for i in range(n):
            topic = topics[i]
            kwargs: dict[str, object] = {"key": keys[i], "value": values[i], "on_delivery": on_delivery}
            if partitions is not None and partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers is not None and headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    producer.produce(topic, **kwargs)  # type: ignore[arg-type]
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        producer.poll(0)
    remaining = producer.flush(config.flush_timeout_ms / 1000)
    if remaining or failures:
        drop_producer(conf)
        raise KafkaConnectionError(
            f"sink {config.name}: {remaining} record(s) unacknowledged after flush, {len(failures)} failed "
            f"({'; '.join(sorted(set(failures))[:3])})"
        )
    yield pa.RecordBatch.from_pydict({"records": pa.array([sent], pa.int64())})


class KafkaSink:
    """A `foreachBatch` function: `query = df.writeStream.foreachBatch(KafkaSink(config)).start()`."""

    def __init__(self, config: KafkaSinkConfig) -> None:
        self.config = config
        self._specs: tuple[SerdeSpec, SerdeSpec] | None = None

    def specs(self, batch: DataFrame) -> tuple[SerdeSpec, SerdeSpec]:
        """Key and value serde specs; a json field without a declared schema takes its columns' types."""
        if self._specs is None:
            specs = []
            for field, column in (("key", self.config.key_column), ("value", self.config.value_column)):
                fmt = getattr(self.config, f"{field}_format")
                if fmt == "json" and getattr(self.config, f"{field}_schema") is None:
                    exclude = (*_ROUTING, self.config.key_column) if column == "*" else ()
                    struct = [f for f in batch.schema.fields if (column == "*" and f.name not in exclude)]
                    if column != "*" and column in batch.columns:
                        # A struct column is the record; a string/binary column is JSON text already.
                        data_type = batch.schema[column].dataType
                        struct = list(getattr(data_type, "fields", []))
                    ddl = (
                        ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in struct) or "value string"
                    )
                    specs.append(SerdeSpec(field=field, format="json", spark_ddl=ddl))
                else:
                    specs.append(SerdeSpec.from_settings(self.config, field))
            self._specs = (specs[0], specs[1])
        return self._specs

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Write one epoch; returns when every record is acknowledged (called by Spark on the driver)."""
        self.write(batch, batch_id)

    def write(self, batch: DataFrame, batch_id: int) -> int:
        """Write one epoch's DataFrame to Kafka and return the number of records sent."""
        if self.config.value_column != "*" and self.config.value_column not in batch.columns:
            raise ConfigError(
                f"sink {self.config.name}: the stream has no {self.config.value_column!r} column "
                f"(columns: {', '.join(batch.columns)})"
            )
        config = self.config
        key_spec, value_spec = self.specs(batch)
        counts = batch.mapInArrow(
            lambda it: produce_arrow(config, key_spec, value_spec, it), RESULT_SCHEMA
        ).collect()
        return sum(int(row["records"]) for row in counts)
