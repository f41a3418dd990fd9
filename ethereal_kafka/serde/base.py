"""The serde contract: a frozen `SerdeSpec` (what the user configured) builds a `Codec` (what runs on executors).

The source connector calls `Codec.decode` on each Arrow batch of raw keys or values and routes the per-row errors
under its error policy; the sink calls `Codec.encode` on the key and value columns before producing. A spec is built
on the driver from `SerdeSettings`, pickled into tasks and built again there, so `build()` needs no SparkContext and
no JVM.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ethereal_kafka.config.connectors import FORMATS, SerdeSettings
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.serde.errors import SerdeError

FIELDS = ("key", "value")


@dataclass(frozen=True)
class SerdeSpec:
    """How one field (key or value) of Kafka records is (de)serialized: a frozen, picklable definition.

    Attributes:
        field: "key" or "value".
        format: "bytes" | "string" | "json" | "avro".
        spark_ddl: json: the Spark DDL field list of the JSON object ("order_id long, customer string").
        schema_file: avro: path of a local .avsc: the schema of schemaless Avro, or the reader (and writer)
            schema with a registry.
        registry_url: avro: a Confluent-compatible registry URL: records use the Confluent wire format
            (magic byte 0, 4-byte big-endian schema id, schemaless Avro payload).
        registry_conf: Extra `SchemaRegistryClient` settings (e.g. `basic.auth.user.info`); masked in repr.
        subject: avro+registry: the subject written to (default TopicNameStrategy `{topic}-{field}`) and, without
            a schema file, the subject whose latest schema is the reader schema.
        schema_text: avro: the reader schema's JSON text, pinned on the driver by `from_settings` / `resolve` so
            executors need neither the file nor a registry round trip; wins over `schema_file`.
        writer_schema_file: schemaless avro only: the schema the bytes were written with, when it differs from
            the reader schema (schema evolution without a registry); default: the reader schema.
        registry_attempts: Attempts per registry request before `RegistryError` (transient failures only).
        registry_backoff_s: First wait between attempts; doubles up to 2 s.
    """

    field: str
    format: str
    spark_ddl: str | None = None
    schema_file: str | None = None
    registry_url: str | None = None
    registry_conf: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    subject: str | None = None
    schema_text: str | None = dataclasses.field(default=None, repr=False)
    writer_schema_file: str | None = None
    registry_attempts: int = 5
    registry_backoff_s: float = 0.2

    def __post_init__(self) -> None:
        if self.field not in FIELDS:
            raise ConfigError(f"serde field must be one of {', '.join(FIELDS)}, not {self.field!r}")
        if self.format not in FORMATS:
            raise ConfigError(f"{self.field}.format={self.format!r}: expected one of {', '.join(FORMATS)}")
        if self.registry_attempts < 1:
            raise ConfigError("registry_attempts must be >= 1")
        # A private copy: the caller's mapping may change later, and the spec must stay a value.
        object.__setattr__(self, "registry_conf", dict(self.registry_conf))

    def __hash__(self) -> int:
        # The generated hash would fail on the `registry_conf` dict; specs are used as cache keys.
        values = [getattr(self, f.name) for f in dataclasses.fields(self)]
        return hash(tuple(tuple(sorted(v.items())) if isinstance(v, Mapping) else v for v in values))

    @classmethod
    def from_settings(cls, settings: SerdeSettings, field: str) -> SerdeSpec:
        """Build the spec of `field` from a connector's settings (`key.*` or `value.*`, `schema.registry.url`).

        Called on the driver. Reads a configured .avsc file into `schema_text` (so executors do not need the
        file) but makes no network call. When the settings name exactly one topic (`topics` of a source, `topic`
        of a sink), `subject` defaults to `{topic}-{field}`. `registry_conf` stays empty: `SerdeSettings` declares
        no registry credentials yet (add them with `dataclasses.replace`).

        Raises:
            ConfigError: an unknown field, a json format without a schema, an avro format with neither schema
                file nor registry, or an unreadable schema file.
        """
        if field not in FIELDS:
            raise ConfigError(f"serde field must be one of {', '.join(FIELDS)}, not {field!r}")
        fmt: str = getattr(settings, f"{field}_format")
        ddl: str | None = getattr(settings, f"{field}_schema")
        schema_file: str | None = getattr(settings, f"{field}_schema_file")
        registry = settings.schema_registry_url if fmt == "avro" else None
        topics = tuple(getattr(settings, "topics", ()) or ())
        sink_topic = getattr(settings, "topic", None)
        if isinstance(sink_topic, str) and sink_topic:
            topics = (sink_topic,)
        subject = f"{topics[0]}-{field}" if len(topics) == 1 else None
        spec = cls(
            field=field,
            format=fmt,
            spark_ddl=ddl if fmt == "json" else None,
            schema_file=schema_file if fmt == "avro" else None,
            registry_url=registry,
            subject=subject if registry else None,
        )
        spec.check()
        if spec.schema_file is not None:
            spec = dataclasses.replace(spec, schema_text=_read_schema_file(field, spec.schema_file))
        return spec

    def check(self) -> None:
        """Check that the settings this format needs are present (no I/O).

        Raises:
            ConfigError: json without `spark_ddl`, avro without a schema file, schema text or registry.
        """
        if self.format == "json" and not self.spark_ddl:
            raise ConfigError(f"{self.field}.format=json needs {self.field}.schema (a Spark DDL field list)")
        if self.format == "avro" and not (self.schema_file or self.schema_text or self.registry_url):
            raise ConfigError(
                f"{self.field}.format=avro needs {self.field}.schema.file or schema.registry.url"
            )

    def resolve(self) -> SerdeSpec:
        """Pin the reader schema into `schema_text`, so every executor decodes with the same schema.

        Called on the driver before planning. Avro with a registry and no schema file fetches the latest schema
        of `subject`; a schema file is read; other formats are returned unchanged.

        Raises:
            ConfigError: avro with a registry but neither schema file nor subject.
            RegistryError: the registry is unreachable or has no such subject.
        """
        if self.format != "avro" or self.schema_text is not None:
            return self
        if self.schema_file is not None:
            return dataclasses.replace(self, schema_text=_read_schema_file(self.field, self.schema_file))
        from ethereal_kafka.serde.registry import registry_client

        if self.subject is None:
            raise ConfigError(
                f"{self.field}.format=avro with a registry and no {self.field}.schema.file reads with the latest "
                "schema of the subject {topic}-"
                + self.field
                + ": name exactly one topic or give a schema file"
            )
        assert self.registry_url is not None
        _, text = registry_client(self).latest(self.subject)
        return dataclasses.replace(self, schema_text=text)

    def build(self) -> Codec:
        """Return the codec this spec describes. Called on executors (once per task or cached) and the driver.

        Raises:
            ConfigError: the spec is incomplete or its schema does not parse.
            RegistryError: avro with a registry, no pinned schema, and the registry cannot be reached.
        """
        self.check()
        if self.format == "bytes":
            from ethereal_kafka.serde.plain import BytesCodec

            return BytesCodec(self)
        if self.format == "string":
            from ethereal_kafka.serde.plain import StringCodec

            return StringCodec(self)
        if self.format == "json":
            from ethereal_kafka.serde.json_codec import JsonCodec

            return JsonCodec(self)
        from ethereal_kafka.serde.avro_codec import AvroCodec

        return AvroCodec(self.resolve())


def _read_schema_file(field: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{field}.schema.file={path!r}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class DecodeResult:
    """What `Codec.decode` returns for one batch.

    Attributes:
        values: One value per input row, of the codec's `arrow_type()`; null for null input and for failed rows.
        errors: Row index -> the error of that row, for the rows that failed (absent rows succeeded).
    """

    values: pa.Array
    errors: dict[int, SerdeError] = field(default_factory=dict)


class Codec(ABC):
    """Turns raw Kafka bytes into typed Arrow values and back, for one field, on one executor.

    Built by `SerdeSpec.build`; holds parsed schemas and registry caches, so build it once per task (or cache it
    per worker) rather than per batch. Not thread-safe.
    """

    def __init__(self, spec: SerdeSpec) -> None:
        """Keep the spec; subclasses parse their schema here and raise `ConfigError` if it is invalid."""
        self.spec = spec

    @abstractmethod
    def arrow_type(self) -> pa.DataType:
        """The Arrow type of decoded values (a struct of nullable fields for json/avro). Stable per codec."""

    def spark_ddl(self) -> str:
        """The Spark DDL of `arrow_type()`: a field list ("`a` bigint, `b` string") for structs, else the type."""
        from ethereal_kafka.serde.ddl import spark_field_list

        return spark_field_list(self.arrow_type())

    @abstractmethod
    def decode(
        self, raw: pa.Array, topics: Sequence[str], partitions: Sequence[int], offsets: Sequence[int]
    ) -> DecodeResult:
        """Decode a batch of raw keys or values.

        Called by the source on executors, once per Arrow batch. `topics`, `partitions` and `offsets` are aligned
        with `raw` and only used to describe errors. A null input row decodes to null without an error. Never
        raises for a bad record: it becomes an entry of `errors` and a null value.

        Raises:
            RegistryError: the registry could not be reached (not a record's fault; the task should fail).
        """

    @abstractmethod
    def encode(self, values: pa.Array, topic: str) -> list[bytes | None]:
        """Encode a column for producing to `topic`: one bytes object (or None for a null) per row.

        Called by the sink on executors, once per Arrow batch.

        Raises:
            SerdeError: for the first row that cannot be encoded (its index is in the message, the row in `raw`).
            RegistryError: the registry could not be reached or refused the writer schema.
        """

    # -- helpers for subclasses ---------------------------------------------------------------------------------
    def _decode_error(
        self,
        message: str,
        row: int,
        raw: bytes | None,
        topics: Sequence[str],
        partitions: Sequence[int],
        offsets: Sequence[int],
        cause: BaseException | None = None,
    ) -> SerdeError:
        error = SerdeError(
            message,
            field=self.spec.field,
            topic=topics[row] if row < len(topics) else None,
            partition=partitions[row] if row < len(partitions) else None,
            offset=offsets[row] if row < len(offsets) else None,
            raw=raw,
            cause_class=type(cause).__name__ if cause is not None else None,
        )
        if cause is not None:
            error.__cause__ = cause
        return error

    def _encode_error(
        self, message: str, row: int, topic: str, value: Any, cause: BaseException
    ) -> SerdeError:
        return SerdeError(
            f"row {row}: {message}",
            field=self.spec.field,
            topic=topic,
            raw=value,
            cause_class=type(cause).__name__,
        )


def decode_rows(
    codec: Codec,
    raw: pa.Array,
    topics: Sequence[str],
    partitions: Sequence[int],
    offsets: Sequence[int],
    decode_one: Callable[[bytes, int], Any],
) -> DecodeResult:
    """Decode row by row with `decode_one(bytes, row) -> python value` and assemble an Arrow array.

    `decode_one` raises any exception for a bad record; it becomes that row's `SerdeError`. A value that Arrow
    cannot convert to `codec.arrow_type()` is an error of its row too. `RegistryError` propagates.
    """
    from ethereal_kafka.serde.errors import RegistryError

    target = codec.arrow_type()
    rows: list[Any] = []
    errors: dict[int, SerdeError] = {}
    for i, data in enumerate(raw.to_pylist()):
        if data is None:
            rows.append(None)
            continue
        try:
            rows.append(decode_one(data, i))
        except RegistryError:
            raise
        except Exception as exc:
            errors[i] = codec._decode_error(
                str(exc) or type(exc).__name__, i, data, topics, partitions, offsets, exc
            )
            rows.append(None)
    try:
        values = pa.array(rows, type=target)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        # One row's value does not fit the type: convert singly to find it, the rest stays decoded.
        for i, row in enumerate(rows):
            try:
                pa.array([row], type=target)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                data = raw[i].as_py()
                errors[i] = codec._decode_error(
                    f"does not fit {target}: {exc}", i, data, topics, partitions, offsets, exc
                )
                rows[i] = None
        values = pa.array(rows, type=target)
    return DecodeResult(values, errors)
