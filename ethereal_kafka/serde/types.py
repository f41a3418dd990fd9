"""Avro schema -> Arrow type, and the value conversions between fastavro's Python objects and Arrow's.

Mapping (every Arrow field nullable; a union with null only marks nullability):
    boolean, int, long, float, double, string, bytes -> bool, int32, int64, float32, float64, string, binary
    record -> struct; array -> list; map -> map<string, T>; enum -> string; fixed -> binary
    date -> date32; timestamp-millis/-micros -> timestamp[us, UTC]; local-timestamp-millis/-micros -> timestamp[us]
    decimal (bytes or fixed) -> decimal128(precision, scale); uuid -> string
    time-millis, time-micros -> int64 microseconds since midnight (Spark has no time-of-day type). Encoding
        passes integers through, which is exact for time-micros; a time-millis field takes milliseconds.
Unions of two or more non-null branches have no Arrow/Spark equivalent here and are rejected when the codec is
built. Unknown logical types fall back to their underlying type, as the Avro specification says.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pyarrow as pa

__all__ = ["AvroTypeError", "avro_to_arrow", "from_avro_value", "needs_value_conversion", "to_avro_value"]

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


class AvroTypeError(ValueError):
    """An Avro schema uses a construct with no Arrow mapping (a multi-branch union, an undefined name)."""


def avro_to_arrow(schema: Any) -> pa.DataType:
    """Return the Arrow type of values decoded with the Avro `schema` (parsed JSON: dict, list or str).

    Raises:
        AvroTypeError: an unsupported construct (the message names the path).
    """
    return _convert(schema, {}, None, "$")


def _fullname(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _convert(schema: Any, named: dict[str, pa.DataType], namespace: str | None, path: str) -> pa.DataType:
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise AvroTypeError(
                f"{path}: union {schema} has {len(branches)} non-null branches; only [null, T] maps"
            )
        return _convert(branches[0], named, namespace, path)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        for candidate in (_fullname(schema, namespace), schema):
            if candidate in named:
                return named[candidate]
        raise AvroTypeError(f"{path}: unknown type {schema!r}")
    if not isinstance(schema, dict):
        raise AvroTypeError(f"{path}: not an Avro schema: {schema!r}")
    kind = schema.get("type")
    logical = _logical(schema)
    if logical is not None:
        return logical
    if kind == "record" or kind == "error":
        name = _fullname(schema["name"], schema.get("namespace", namespace))
        inner_ns = name.rsplit(".", 1)[0] if "." in name else None
        # Register the name before the fields so a reference inside fails clearly rather than recursing.
        named[name] = pa.null()
        fields = [
            pa.field(f["name"], _convert(f["type"], named, inner_ns, f"{path}.{f['name']}"), nullable=True)
            for f in schema.get("fields", [])
        ]
        if not fields:
            raise AvroTypeError(f"{path}: record {name} has no fields (an empty struct has no Spark type)")
        named[name] = pa.struct(fields)
        return named[name]
    if kind in ("enum", "fixed"):
        name = _fullname(schema["name"], schema.get("namespace", namespace))
        named[name] = pa.string() if kind == "enum" else pa.binary()
        return named[name]
    if kind == "array":
        return pa.list_(_convert(schema["items"], named, namespace, f"{path}[]"))
    if kind == "map":
        return pa.map_(pa.string(), _convert(schema["values"], named, namespace, f"{path}{{}}"))
    if isinstance(kind, str | list | dict):
        return _convert(kind, named, namespace, path)
    raise AvroTypeError(f"{path}: not an Avro schema: {schema!r}")


def _logical(schema: dict[str, Any]) -> pa.DataType | None:
    logical = schema.get("logicalType")
    base = schema.get("type")
    if logical == "decimal" and base in ("bytes", "fixed"):
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical == "date" and base == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and base == "long":
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and base == "long":
        return pa.timestamp("us")
    if (logical, base) in (("time-millis", "int"), ("time-micros", "long")):
        return pa.int64()
    if logical == "uuid" and base == "string":
        return pa.string()
    return None


def needs_value_conversion(schema: Any) -> bool:
    """True if decoded values of `schema` contain objects Arrow cannot take as they are (times, UUIDs)."""
    if isinstance(schema, list):
        return any(needs_value_conversion(s) for s in schema)
    if not isinstance(schema, dict):
        return False
    if schema.get("logicalType") in ("time-millis", "time-micros", "uuid"):
        return True
    return any(
        needs_value_conversion(schema.get(key))
        for key in ("type", "items", "values")
        if isinstance(schema.get(key), dict | list)
    ) or any(needs_value_conversion(f.get("type")) for f in schema.get("fields", []))


def from_avro_value(value: Any) -> Any:
    """Convert a fastavro-decoded value so `pa.array` accepts it: times to microseconds since midnight, UUIDs to
    text. Called only when `needs_value_conversion` is true for the schema."""
    if isinstance(value, dict):
        return {k: from_avro_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_avro_value(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    return value


def to_avro_value(value: Any, t: pa.DataType) -> Any:
    """Convert an Arrow `to_pylist` value of type `t` to what fastavro writes: maps become dicts (Arrow gives
    lists of pairs); everything else passes as it is (fastavro takes datetimes, dates, Decimals, bytes)."""
    if value is None:
        return None
    if pa.types.is_map(t):
        return {k: to_avro_value(v, t.item_type) for k, v in value}
    if pa.types.is_struct(t):
        return {f.name: to_avro_value(value[f.name], f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [to_avro_value(v, t.value_type) for v in value]
    return value
