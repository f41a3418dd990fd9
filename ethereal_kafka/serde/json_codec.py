"""The `json` format: one JSON object per record, typed by a Spark DDL field list.

Decoding reads a whole batch with Arrow's JSON reader and an explicit schema (unexpected fields ignored); only when
that fails, or for records it cannot read safely, are records parsed one by one (`json_decode`: orjson, or
`json.loads` where the two could differ) to find the bad ones. Both paths accept the same inputs: a record is good when it is one JSON object whose declared fields convert
to their type without loss (missing fields and JSON nulls are null; an int field rejects 1.5 and "1"; a decimal
rejects digits beyond its scale).

JSON representation of special types, both ways:
    timestamp: ISO-8601 string; encoded in UTC with microseconds and a `Z` suffix; decoded from any ISO-8601 form,
        a string without offset meaning UTC. timestamp_ntz: the same without suffix.
    date: "YYYY-MM-DD".
    decimal: encoded as a JSON string of its exact digits ("12.50") so no reader rounds it through a double;
        decoded from a string or a number.
    binary: base64 string.
    map<string,T>: JSON object.
    float/double: NaN and infinities are not JSON: encoding them is an error, decoding rejects them.
Encoding writes every declared field in declared order, nulls included, compact (`{"a":1,"b":null}`): the bytes of
`json.dumps(..., separators=(",", ":"), ensure_ascii=False)`. A struct batch is encoded column by column
(`json_encode`); the row-by-row path here stays the reference and handles what that plan does not (and errors).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from ethereal_kafka.errors import ConfigError
from ethereal_kafka.serde.base import Codec, DecodeResult
from ethereal_kafka.serde.ddl import DdlError, parse_ddl
from ethereal_kafka.serde.json_decode import RowDecoder
from ethereal_kafka.serde.json_encode import StructEncoder, struct_encoder
from ethereal_kafka.serde.spec import SerdeSpec

#: Chunks of at most this many records are parsed one by one when their bulk read fails.
_BISECT_MIN = 32
#: At most this many failed bulk reads are split again per batch; after that, failures go record by record.
_BISECT_BUDGET = 256
#: A record Arrow's reader may take: after stripping ASCII whitespace, one line from "{" to "}". (This also keeps a
#: bare `null` record away from the Arrow reader, which crashes on one in first position.)
_SINGLE_OBJECT_LINE = r"^[ \t\n\r\x0b\x0c]*\{[^\n\r]*\}[ \t\n\r\x0b\x0c]*$"


class JsonCodec(Codec):
    """`format=json` with a Spark DDL schema. Decodes to a struct; encodes a struct column to JSON objects."""

    def __init__(self, spec: SerdeSpec) -> None:
        """Parse the DDL once.

        Raises:
            ConfigError: the DDL is missing or does not parse.
        """
        super().__init__(spec)
        try:
            self._type = parse_ddl(spec.spark_ddl or "")
        except DdlError as exc:
            raise ConfigError(f"{spec.field}.schema={spec.spark_ddl!r}: {exc}") from exc
        self._schema = pa.schema(list(self._type))
        self._vectorized = all(_arrow_reads(f.type) for f in self._type)
        self._row_decoder = RowDecoder(self._type)
        #: Column-wise encoders by the struct type of the encoded column (None: that type goes row by row).
        self._plans: dict[pa.DataType, StructEncoder | None] = {}

    def arrow_type(self) -> pa.DataType:
        """The declared struct, all fields nullable."""
        return self._type

    def decode(
        self, raw: pa.Array, topics: Sequence[str], partitions: Sequence[int], offsets: Sequence[int]
    ) -> DecodeResult:
        """Decode a batch; see the module docstring for what a good record is. Never raises for bad records.

        Records Arrow can read safely are read in bulk; when a bulk read fails, the records are halved and each
        half read again (a bounded number of times), so a few bad records cost a few extra bulk reads and only
        the small chunks around them are parsed record by record.
        """
        candidates: list[int] = []
        if self._vectorized and len(raw):
            single = pc.fill_null(pc.match_substring_regex(raw.cast(pa.binary()), _SINGLE_OBJECT_LINE), False)
            candidates = pc.indices_nonzero(single).to_pylist()
        order, parts, rejected = self._read_bisecting(raw, candidates)
        if len(order) == len(raw) and len(parts) == 1:
            return DecodeResult(parts[0], {})
        in_bulk = set(order)
        valid = raw.is_valid().to_pylist()
        slow = sorted(set(rejected) | {i for i, ok in enumerate(valid) if ok and i not in in_bulk})
        records = raw.take(pa.array(slow, pa.int64())).to_pylist() if slow else []
        decoded, failures = self._decode_records(records)
        errors = {
            slow[k]: self._decode_error(str(exc), slow[k], records[k], topics, partitions, offsets, exc)
            for k, exc in sorted(failures.items())
        }
        parts.append(decoded)
        positions: list[int | None] = [None] * len(raw)
        for k, i in enumerate(order + slow):
            positions[i] = k
        values = pc.take(pa.concat_arrays(parts), pa.array(positions, pa.int64()))
        return DecodeResult(values, errors)

    def _read_bisecting(
        self, raw: pa.Array, indices: list[int]
    ) -> tuple[list[int], list[pa.Array], list[int]]:
        """Bulk-read `indices`, halving chunks that fail; return (rows read in bulk in order, their arrays, rest)."""
        order: list[int] = []
        parts: list[pa.Array] = []
        rejected: list[int] = []
        pending = [indices] if indices else []
        budget = _BISECT_BUDGET
        whole = len(indices) == len(raw)
        while pending:
            chunk = pending.pop()
            records = raw if whole and len(chunk) == len(raw) else raw.take(pa.array(chunk, pa.int64()))
            values = self._read_batch(records)
            if values is not None:
                order += chunk
                parts.append(values)
            elif len(chunk) <= _BISECT_MIN or budget <= 0:
                rejected += chunk
            else:
                budget -= 1
                middle = len(chunk) // 2
                pending += [chunk[middle:], chunk[:middle]]
        return order, parts, rejected

    def _read_batch(self, records: pa.Array) -> pa.Array | None:
        # Every record is one line starting with "{" and ending with "}", so it yields at least one row: the row
        # count equals the record count exactly when each record is one object, which keeps rows aligned.
        lines = pc.binary_join_element_wise(records.cast(pa.binary()), b"\n", b"")
        _, offsets_buffer, data_buffer = lines.buffers()
        ends = pa.Array.from_buffers(pa.int32(), len(lines) + 1, [None, offsets_buffer], offset=lines.offset)
        start, stop = ends[0].as_py(), ends[-1].as_py()
        buffer = data_buffer.slice(start, stop - start)
        try:
            table = pa_json.read_json(
                pa.BufferReader(buffer),
                read_options=pa_json.ReadOptions(block_size=max(1 << 20, stop - start + 1)),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=self._schema, unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != len(records):
            return None
        table = table.select(self._schema.names)
        return pa.StructArray.from_arrays(
            [table.column(name).combine_chunks() for name in self._schema.names], fields=list(self._type)
        )

    def _decode_records(self, records: list[bytes]) -> tuple[pa.StructArray, dict[int, Exception]]:
        """The records Arrow's reader did not take, decoded one by one (see `json_decode.RowDecoder`)."""
        return self._row_decoder.decode_many(records)

    def encode(self, values: pa.Array, topic: str) -> list[bytes | None]:
        """Encode a struct column as JSON objects (declared fields, declared order); string/binary pass through.

        A struct batch is written column by column (`json_encode`) when its plan can write it byte for byte as
        the row-by-row path below does; otherwise, and to name the row of an error, it goes row by row.

        Raises:
            SerdeError: the column lacks a declared field or has an unsupported type (row 0), or a row holds a
                value JSON cannot represent (NaN, infinity).
        """
        t = values.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return [None if v is None else v.encode("utf-8") for v in values.to_pylist()]
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return list(values.to_pylist())
        if not pa.types.is_struct(t):
            exc = TypeError(f"json format encodes struct, string or binary columns, not {t}")
            raise self._encode_error(str(exc), 0, topic, None, exc) from exc
        column_types = {f.name: f.type for f in t}
        missing = [f.name for f in self._type if f.name not in column_types]
        if missing:
            exc = TypeError(
                f"the column has no field(s) {', '.join(missing)} declared in {self.spec.field}.schema"
            )
            raise self._encode_error(str(exc), 0, topic, None, exc) from exc
        fast = self._encode_planned(values)
        if fast is not None:
            return fast
        out: list[bytes | None] = []
        for i, row in enumerate(values.to_pylist()):
            if row is None:
                out.append(None)
                continue
            try:
                obj = {f.name: _to_json(row[f.name], column_types[f.name]) for f in self._type}
                out.append(
                    json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
                )
            except (ValueError, TypeError) as exc:
                raise self._encode_error(str(exc), i, topic, row, exc) from exc
        return out

    def _encode_planned(self, values: pa.StructArray) -> list[bytes | None] | None:
        """The column-wise encoding (`json_encode`) of a struct batch, or None to encode it row by row."""
        plans = self._plans
        if values.type not in plans:
            plans[values.type] = struct_encoder(values.type, [f.name for f in self._type])
        encoder = plans[values.type]
        return None if encoder is None else encoder(values)


def _arrow_reads(t: pa.DataType) -> bool:
    """True if Arrow's JSON reader converts `t` exactly as `json_decode.field_converter` does."""
    if pa.types.is_struct(t):
        return all(_arrow_reads(f.type) for f in t)
    if pa.types.is_list(t):
        return _arrow_reads(t.value_type)
    if pa.types.is_timestamp(t):
        return t.tz is not None
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_decimal(t)
    )


def _to_json(value: Any, t: pa.DataType) -> Any:
    """Convert an Arrow `to_pylist` value of type `t` to what `json.dumps` writes (see the module docstring)."""
    if value is None:
        return None
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return value.isoformat(timespec="microseconds")
        return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    if pa.types.is_date(t):
        return value.isoformat()
    if pa.types.is_decimal(t):
        return format(value, "f")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return base64.b64encode(value).decode("ascii")
    if pa.types.is_floating(t) and not math.isfinite(value):
        raise ValueError(f"{value} cannot be written as JSON")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_to_json(v, t.value_type) for v in value]
    if pa.types.is_map(t):
        return {str(k): _to_json(v, t.item_type) for k, v in value}
    if pa.types.is_struct(t):
        return {f.name: _to_json(value[f.name], f.type) for f in t}
    return value
