"""Turn the sink's input rows (Arrow batches) into Kafka records: routing, key/value serialization, headers.

Used by every sink path (at-least-once, at-most-once, transactional) inside Spark tasks.

Input columns: `value.column` (default `value`; `*` = every column but key/topic/partition/headers, as one
record) serialized per `value.format`; `key.column` (default `key`, optional) per `key.format`; `topic` (string; used
when the connector has no `topic`), `partition` (int, optional), `headers` (array<struct<key,value>>, optional).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.serde import Codec, SerdeSpec

#: Columns that steer a record and are never part of a `value.column=*` record.
ROUTING_COLUMNS = ("topic", "partition", "headers")

_CODECS: dict[SerdeSpec, Codec] = {}


@dataclass(frozen=True)
class OutRecord:
    """One record to produce."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None


def codec_for(spec: SerdeSpec) -> Codec:
    """This worker's codec for `spec`, reused across epochs (building one may ask the schema registry)."""
    codec = _CODECS.get(spec)
    if codec is None:
        codec = _CODECS[spec] = spec.build()
    return codec


def _column(batch: pa.RecordBatch, name: str, exclude: tuple[str, ...]) -> pa.Array | None:
    names = batch.schema.names
    if name == "*":
        rest = [n for n in names if n not in exclude]
        return pa.StructArray.from_arrays([batch.column(n) for n in rest], names=rest)
    return batch.column(names.index(name)) if name in names else None


def _encode(codec: Codec, column: pa.Array | None, topics: list[str], n: int) -> list[bytes | None]:
    """Serialize a column; rows for different topics are encoded with their own topic as context."""
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


def encode_batches(
    config: KafkaSinkConfig, key_spec: SerdeSpec, value_spec: SerdeSpec, batches: Iterable[pa.RecordBatch]
) -> Iterator[OutRecord]:
    """Yield the records of every row, in row order.

    Raises:
        ConfigError: no topic configured and a row has none.
        SerdeError: a value cannot be serialized (the task fails: output is the job's responsibility).
    """
    key_codec = codec_for(key_spec)
    value_codec = codec_for(value_spec)
    exclude = (*ROUTING_COLUMNS, config.key_column)
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
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
        values = _encode(value_codec, _column(batch, config.value_column, exclude), topics, n)
        partitions = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
        for i in range(n):
            row_headers = (
                [(h["key"], h["value"]) for h in headers[i]] if headers is not None and headers[i] else None
            )
            yield OutRecord(topics[i], partitions[i] if partitions else None, keys[i], values[i], row_headers)


def sink_specs(config: KafkaSinkConfig, columns: list[tuple[str, object]]) -> tuple[SerdeSpec, SerdeSpec]:
    """Key and value serde specs of a sink; a json field without a declared schema takes its columns' types.

    Args:
        columns: `(name, Spark DataType)` of the DataFrame the sink writes (driver side).
    """
    specs = []
    types = dict(columns)
    for field, column in (("key", config.key_column), ("value", config.value_column)):
        fmt = getattr(config, f"{field}_format")
        if fmt == "json" and getattr(config, f"{field}_schema") is None:
            exclude = (*ROUTING_COLUMNS, config.key_column)
            if column == "*":
                struct = [(n, t) for n, t in columns if n not in exclude]
            else:
                # A struct column is the record; a string/binary column is JSON text already.
                struct = [(f.name, f.dataType) for f in getattr(types.get(column), "fields", [])]
            ddl = ", ".join(f"`{n}` {t.simpleString()}" for n, t in struct) or "value string"  # type: ignore[attr-defined]
            specs.append(SerdeSpec(field=field, format="json", spark_ddl=ddl))
        else:
            specs.append(SerdeSpec.from_settings(config, field))
    return specs[0], specs[1]
