"""What one field (key or value) of Kafka records is encoded as: `SerdeSpec`, a frozen, picklable definition.

Connectors build specs on the driver (`SerdeSpec.from_settings`) and ship them to executors, where
`serde.codecs.build_codec` turns a spec into a `Codec`. This module holds data and its checks only: it imports no
codec and no registry client.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ethereal_kafka.config.connectors import FORMATS, SerdeSettings
from ethereal_kafka.errors import ConfigError

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
            spec = dataclasses.replace(spec, schema_text=read_schema_file(field, spec.schema_file))
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


def read_schema_file(field: str, path: str) -> str:
    """The text of the schema file `path` of `field`.

    Raises:
        ConfigError: the file cannot be read (named with the setting).
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{field}.schema.file={path!r}: {exc.strerror or exc}") from exc
