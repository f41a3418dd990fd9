"""The `avro` format: schemaless Avro with a local schema, or the Confluent wire format with a schema registry.

Without a registry, each record is a schemaless Avro payload written with `SerdeSpec.writer_schema_file` (default:
the reader schema) and read with the reader schema (`schema_file` / `schema_text`).

With a registry (`registry_url`), each record is `0x00`, a 4-byte big-endian schema id, then the schemaless payload.
Decoding fetches the writer schema by id (once per id per codec) and resolves it to the reader schema, so records
written with older or newer compatible schemas all decode to the reader's fields (new fields get their defaults,
removed ones are dropped). The reader schema is the .avsc when one is configured; otherwise the latest schema of
`subject` when the spec was resolved on the driver (`serde.codecs.pin_schema`), so every executor reads with the same
schema for the life of the job. Encoding registers the reader schema under `subject` (default `{topic}-{field}`)
once per subject and codec and writes with it.

A record with a bad magic byte, a short header, an unknown schema id, a truncated payload or trailing bytes is a
`SerdeError` of its row; an unreachable registry raises `RegistryError`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import fastavro
import pyarrow as pa

from ethereal_kafka.errors import ConfigError
from ethereal_kafka.serde.base import Codec, DecodeResult, decode_rows
from ethereal_kafka.serde.errors import SerdeError
from ethereal_kafka.serde.registry import RegistryClient, UnknownSchemaError, registry_client
from ethereal_kafka.serde.spec import SerdeSpec
from ethereal_kafka.serde.types import (
    AvroTypeError,
    avro_to_arrow,
    from_avro_value,
    needs_value_conversion,
    to_avro_value,
)

MAGIC_BYTE = 0
HEADER_SIZE = 5


def parse_avro(text: str, origin: str) -> tuple[Any, Any]:
    """Parse Avro schema JSON text into `(json, fastavro parsed schema)`.

    Raises:
        ConfigError: not JSON or not a valid Avro schema; `origin` names where the text came from.
    """
    try:
        raw = json.loads(text)
        return raw, fastavro.parse_schema(json.loads(text))
    except (ValueError, KeyError, TypeError, fastavro.schema.SchemaParseException) as exc:
        raise ConfigError(f"{origin}: not a valid Avro schema: {exc}") from exc


class AvroCodec(Codec):
    """`format=avro`: decodes to the reader schema's Arrow type (a struct for records); see the module docstring."""

    def __init__(self, spec: SerdeSpec) -> None:
        """Parse the reader (and schemaless writer) schema once; bind the registry client if there is one.

        Expects a resolved spec (`schema_text` set, see `serde.codecs.pin_schema`); `build_codec` pins it.

        Raises:
            ConfigError: no schema, or a schema that does not parse or has no Arrow mapping.
        """
        super().__init__(spec)
        if spec.schema_text is None:
            raise ConfigError(
                f"{spec.field}.format=avro: the spec has no reader schema; call serde.codecs.pin_schema first"
            )
        origin = spec.schema_file or f"{spec.field} reader schema"
        self._reader_json, self._reader = parse_avro(spec.schema_text, origin)
        try:
            self._type = avro_to_arrow(self._reader_json)
        except AvroTypeError as exc:
            raise ConfigError(f"{origin}: {exc}") from exc
        self._convert = needs_value_conversion(self._reader_json)
        self._registry: RegistryClient | None = registry_client(spec) if spec.registry_url else None
        self._writer = self._reader
        self._writer_is_reader = True
        if self._registry is None and spec.writer_schema_file is not None:
            try:
                with open(spec.writer_schema_file, encoding="utf-8") as handle:
                    writer_text = handle.read()
            except OSError as exc:
                raise ConfigError(f"{spec.writer_schema_file}: {exc.strerror or exc}") from exc
            _, self._writer = parse_avro(writer_text, spec.writer_schema_file)
            self._writer_is_reader = False
        self._writers_by_id: dict[int, Any] = {}
        self._ids_by_subject: dict[str, int] = {}

    def arrow_type(self) -> pa.DataType:
        """The reader schema's Arrow type (see `ethereal_kafka.serde.types`)."""
        return self._type

    def decode(
        self, raw: pa.Array, topics: Sequence[str], partitions: Sequence[int], offsets: Sequence[int]
    ) -> DecodeResult:
        """Decode each record; bad records become per-row errors.

        Raises:
            RegistryError: the registry could not be reached while fetching a writer schema.
        """
        one = self._decode_wire if self._registry is not None else self._decode_schemaless
        return decode_rows(self, raw, topics, partitions, offsets, lambda data, _row: one(data))

    def _decode_schemaless(self, data: bytes) -> Any:
        return self._read(data, self._writer, None if self._writer_is_reader else self._reader)

    def _decode_wire(self, data: bytes) -> Any:
        if len(data) < HEADER_SIZE:
            raise ValueError(f"{len(data)} bytes is shorter than the 5-byte Confluent wire format header")
        if data[0] != MAGIC_BYTE:
            raise ValueError(f"magic byte {data[0]} is not the Confluent wire format's 0")
        schema_id = int.from_bytes(data[1:HEADER_SIZE], "big")
        writer = self._writer_schema(schema_id)
        return self._read(data[HEADER_SIZE:], writer, self._reader)

    def _writer_schema(self, schema_id: int) -> Any:
        writer = self._writers_by_id.get(schema_id)
        if writer is None:
            assert self._registry is not None
            text = self._registry.schema_by_id(schema_id)  # UnknownSchemaError -> this row's error
            _, writer = parse_avro(text, f"schema id {schema_id} at {self._registry.url}")
            self._writers_by_id[schema_id] = writer
        return writer

    def _read(self, payload: bytes, writer: Any, reader: Any) -> Any:
        stream = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(stream, writer, reader)
        except EOFError as exc:
            raise ValueError(f"truncated Avro payload: {len(payload)} byte(s) end inside the record") from exc
        if stream.tell() != len(payload):
            raise ValueError(f"{len(payload) - stream.tell()} trailing byte(s) after the Avro payload")
        return from_avro_value(value) if self._convert else value

    def encode(self, values: pa.Array, topic: str) -> list[bytes | None]:
        """Encode each row with the reader schema (registering it under the subject first, with a registry).

        Raises:
            SerdeError: the first row fastavro cannot write with the schema (row index in the message).
            RegistryError: the registry is unreachable or refuses the schema.
        """
        header = b""
        if self._registry is not None:
            subject = self.spec.subject or f"{topic}-{self.spec.field}"
            schema_id = self._ids_by_subject.get(subject)
            if schema_id is None:
                schema_id = self._registry.register(subject, json.dumps(self._reader_json))
                self._ids_by_subject[subject] = schema_id
            header = bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big")
        out: list[bytes | None] = []
        for i, value in enumerate(values.to_pylist()):
            if value is None:
                out.append(None)
                continue
            stream = io.BytesIO()
            stream.write(header)
            try:
                fastavro.schemaless_writer(stream, self._reader, to_avro_value(value, values.type))
            except Exception as exc:  # fastavro raises many types (struct.error, ValueError, TypeError, ...)
                raise self._encode_error(
                    f"cannot write as Avro: {type(exc).__name__}: {exc}", i, topic, value, exc
                ) from exc
            out.append(stream.getvalue())
        return out


def is_unknown_schema(error: SerdeError) -> bool:
    """True if a decode error was caused by a schema id the registry does not know."""
    return error.cause_class == UnknownSchemaError.__name__
