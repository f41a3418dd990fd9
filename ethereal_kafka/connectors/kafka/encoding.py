"""Turn the sink's input rows (Arrow batches) into Kafka records: routing, key/value serialization, headers.

Used by every sink path (at-least-once, at-most-once, transactional) inside Spark tasks.

Input columns: `value.column` (default `value`; `*` = every column but key/topic/partition/headers, as one
record) serialized per `value.format`; `key.column` (default `key`, optional) per `key.format`; `topic` (string; used
when the connector has no `topic`), `partition` (int, optional), `headers` (array<struct<key,value>>, optional).

A query may write several sinks (`SinkOutput`s): each row then names its sink's index in `__sink`, and each sink
reads its own key and value columns (its connector's `key.column`/`value.column`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from ethereal_kafka.config.connectors import KafkaSinkConfig
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.serde import Codec, SerdeSpec, build_codec

#: Column naming, per row, the index of the sink (in a query's outputs) a multi-sink query writes it to.
SINK_INDEX_COLUMN = "__sink"

#: Columns that steer a record and are never part of a `value.column=*` record.
ROUTING_COLUMNS = ("topic", "partition", "headers", SINK_INDEX_COLUMN)

_CODECS: dict[SerdeSpec, Codec] = {}


@dataclass(frozen=True)
class OutRecord:
    """One record to produce (dead letters and other single records; a sink's rows go as `EncodedBatch`)."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None


@dataclass(frozen=True)
class EncodedBatch:
    """The records of one input batch, field by field (slot i of each list is record i), in row order: what the
    sink produces without building one object per record.

    `topic` is the topic of every record (a configured topic) or one per record; `partitions` and `headers` are
    None when the batch has no such column, and a slot is None for a record without one.
    """

    topic: str | list[str]
    keys: list[bytes | None]
    values: list[bytes | None]
    partitions: list[int | None] | None = None
    headers: list[list[tuple[str, bytes | None]] | None] | None = None


@dataclass(frozen=True)
class SinkOutput:
    """One sink written by a query: its connector (whose `key.column`/`value.column` name this output's columns)
    and its key/value serde specs, fixed on the driver from the query's schema (picklable)."""

    config: KafkaSinkConfig
    key_spec: SerdeSpec
    value_spec: SerdeSpec


def codec_for(spec: SerdeSpec) -> Codec:
    """This worker's codec for `spec`, reused across epochs (building one may ask the schema registry)."""
    codec = _CODECS.get(spec)
    if codec is None:
        codec = _CODECS[spec] = build_codec(spec)
    return codec


def _column(batch: pa.RecordBatch, name: str, exclude: tuple[str, ...]) -> pa.Array | None:
    names = batch.schema.names
    if name == "*":
        rest = [n for n in names if n not in exclude]
        return pa.StructArray.from_arrays([batch.column(n) for n in rest], names=rest)
    return batch.column(names.index(name)) if name in names else None


def _encode(codec: Codec, column: pa.Array | None, topics: list[str], n: int) -> list[bytes | None]:
    """Serialize a column; rows for different topics are encoded with their own topic as context (`topics`: one
    per row, or one for all)."""
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
) -> Iterator[EncodedBatch]:
    """Yield the records of every non-empty batch, one `EncodedBatch` per batch, in row order.

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
        topic: str | list[str]
        if config.topic:
            topic = config.topic
            topics = [topic]
        elif "topic" in names:
            topic = topics = batch.column(names.index("topic")).to_pylist()
        else:
            raise ConfigError(f"sink {config.name}: no topic configured and the stream has no topic column")
        if any(not t for t in topics):
            raise ConfigError(
                f"sink {config.name}: a row has an empty topic column and no topic is configured"
            )
        keys = _encode(key_codec, _column(batch, config.key_column, ()), topics, n)
        values = _encode(value_codec, _column(batch, config.value_column, exclude), topics, n)
        partitions = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        headers = None
        if "headers" in names:
            headers = [
                [(h["key"], h["value"]) for h in row] if row else None
                for row in batch.column(names.index("headers")).to_pylist()
            ]
        yield EncodedBatch(topic, keys, values, partitions, headers)


def sink_specs(config: KafkaSinkConfig, columns: Sequence[tuple[str, object]]) -> tuple[SerdeSpec, SerdeSpec]:
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


def encode_outputs(
    outputs: Sequence[SinkOutput], batches: Iterable[pa.RecordBatch]
) -> Iterator[EncodedBatch]:
    """Yield the records of every row for the sink it names, as `EncodedBatch`es: with one output, every row in
    row order; with several, per batch the rows of output 0, then of output 1, ... each in row order (a
    deterministic order).

    Raises:
        ConfigError: a row names no output or an unknown one.
        SerdeError: a value cannot be serialized.
    """
    if len(outputs) == 1:
        only = outputs[0]
        yield from encode_batches(only.config, only.key_spec, only.value_spec, batches)
        return
    import pyarrow.compute as pc

    for batch in batches:
        if batch.num_rows == 0:
            continue
        names = batch.schema.names
        if SINK_INDEX_COLUMN not in names:
            raise ConfigError(f"a query writing {len(outputs)} sinks needs a {SINK_INDEX_COLUMN} column")
        index = batch.column(names.index(SINK_INDEX_COLUMN))
        if index.null_count or (len(index) and int(pc.max(index).as_py()) >= len(outputs)):
            raise ConfigError(f"a row names no sink, or a sink beyond the query's {len(outputs)} sinks")
        for i, output in enumerate(outputs):
            subset = batch.filter(pc.equal(index, i))
            if subset.num_rows:
                yield from encode_batches(output.config, output.key_spec, output.value_spec, [subset])
