"""Record-by-record JSON decoding for the `json` format: a converter per declared type, built once per schema.

`JsonCodec.decode` uses `RowDecoder` for the records Arrow's bulk reader does not take: records of types it does not
read exactly (date, binary, map, timestamp_ntz), and bad records. A record is parsed by `orjson.loads`, or by
`json.loads` where orjson could differ: a record orjson rejects (NaN, a UTF-8 BOM, a lone surrogate escape, ...; then
`json.loads` gives the value or the error the codec always gave, except that a lone surrogate escape is now an error
of the record rather than a failed batch) and a record holding a run of 19 or more digits (orjson reads an integer
beyond 64 bits as a float). Every other JSON text parses to the same value with both. The
parsed object is then converted field by field by closures made once per type, with no type dispatch per value.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import re
from collections.abc import Callable
from typing import Any

import orjson
import pyarrow as pa

#: Converts a parsed JSON value at `path` to the Python value Arrow builds the type from; ValueError/TypeError if
#: it can't.
FieldConverter = Callable[[Any, str], Any]

_INT_RANGES = {
    8: (-(2**7), 2**7 - 1),
    16: (-(2**15), 2**15 - 1),
    32: (-(2**31), 2**31 - 1),
    64: (-(2**63), 2**63 - 1),
}
#: Records orjson may read differently from `json.loads` (a long integer): these are parsed by `json.loads`.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


#: What a record that does not decode raises (the codec turns each into a SerdeError of that record).
DECODE_ERRORS = (ValueError, TypeError, OverflowError, decimal.InvalidOperation)


class RowDecoder:
    """Decodes JSON records to the declared struct (built once per codec)."""

    def __init__(self, t: pa.StructType) -> None:
        self._type = t
        self._columns = [(f.name, f.type, _column_types(f.type), field_converter(f.type)) for f in t]

    def decode_many(self, records: list[bytes]) -> tuple[pa.StructArray, dict[int, Exception]]:
        """The struct of `records` (a record that fails is null) and each failure's exception by position.

        Gives the values and errors of calling the decoder on each record, field by field in declared order, but
        works column by column: a column of plain values of the right Python types goes to Arrow in one call.
        """
        errors: dict[int, Exception] = {}
        objects: list[dict[str, Any]] = []
        for i, data in enumerate(records):
            try:
                obj = _parse(data)
                if not isinstance(obj, dict):
                    raise ValueError(f"expected a JSON object, got JSON {json_kind(obj)}")
            except DECODE_ERRORS as exc:
                errors[i] = exc
                obj = {}
            objects.append(obj)
        arrays = []
        for name, t, plain_types, convert in self._columns:
            values = [obj.get(name) for obj in objects]
            array = None
            if plain_types is not None and set(map(type, values)) <= plain_types:
                try:
                    array = pa.array(values, t)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                    array = None  # e.g. out of range: the converter names the record and the limit
            if array is None:
                for i, value in enumerate(values):
                    if i in errors:
                        values[i] = None
                        continue
                    try:
                        values[i] = convert(value, name)
                    except DECODE_ERRORS as exc:
                        errors[i] = exc
                        values[i] = None
                array = pa.array(values, t)
            arrays.append(array)
        mask = pa.array([i in errors for i in range(len(records))], pa.bool_()) if errors else None
        return pa.StructArray.from_arrays(arrays, fields=list(self._type), mask=mask), errors


def _column_types(t: pa.DataType) -> set[type] | None:
    """The Python types of parsed values a column of `t` takes as they are (None: each value is converted)."""
    if pa.types.is_boolean(t):
        return {bool, type(None)}
    if pa.types.is_integer(t):
        return {int, type(None)}
    if pa.types.is_floating(t):
        return {float, int, type(None)}
    if pa.types.is_string(t):
        return {str, type(None)}
    return None


def _parse(data: bytes) -> Any:
    if _LONG_DIGITS.search(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    try:
        obj = json.loads(data, parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 JSON: {exc.reason} at byte {exc.start}") from exc
    try:
        # A lone surrogate escape ("\ud800") parses, but no UTF-8 string holds it: Arrow would fail the batch.
        json.dumps(obj, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"not UTF-8 JSON: a lone surrogate escape ({exc.reason})") from exc
    return obj


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def field_converter(t: pa.DataType) -> FieldConverter:
    """The converter of one declared type (see the codec's module docstring for what each type accepts)."""
    if pa.types.is_boolean(t):
        return _checked(t, lambda v: isinstance(v, bool), lambda v, path: v)
    if pa.types.is_integer(t):
        low, high = _INT_RANGES[t.bit_width]

        def integer(value: int, path: str) -> int:
            if not low <= value <= high:
                raise ValueError(f"{path}: {value} is out of range for {t}")
            return value

        return _checked(t, lambda v: isinstance(v, int) and not isinstance(v, bool), integer)
    if pa.types.is_floating(t):
        return _checked(
            t, lambda v: isinstance(v, int | float) and not isinstance(v, bool), lambda v, p: float(v)
        )
    if pa.types.is_string(t):
        return _checked(t, lambda v: isinstance(v, str), lambda v, path: v)
    if pa.types.is_decimal(t):
        return _checked(
            t,
            lambda v: isinstance(v, str | int | float) and not isinstance(v, bool),
            lambda v, p: _decimal(v, t, p),
        )
    if pa.types.is_timestamp(t):
        return _checked(t, lambda v: isinstance(v, str), lambda v, path: _timestamp(v, t, path))
    if pa.types.is_date(t):
        return _checked(t, lambda v: isinstance(v, str), lambda v, path: dt.date.fromisoformat(v))
    if pa.types.is_binary(t):
        return _checked(t, lambda v: isinstance(v, str), _base64)
    if pa.types.is_list(t):
        item = field_converter(t.value_type)
        return _checked(
            t,
            lambda v: isinstance(v, list),
            lambda v, path: [item(x, f"{path}[{i}]") for i, x in enumerate(v)],
        )
    if pa.types.is_map(t):
        return _checked(t, lambda v: isinstance(v, dict), _map_converter(t))
    if pa.types.is_struct(t):
        fields = [(f.name, field_converter(f.type)) for f in t]
        return _checked(
            t,
            lambda v: isinstance(v, dict),
            lambda v, path: {name: convert(v.get(name), f"{path}.{name}") for name, convert in fields},
        )

    def unsupported(value: Any, path: str) -> Any:
        if value is None:
            return None
        raise TypeError(f"{path}: unsupported type {t}")

    return unsupported


def _checked(
    t: pa.DataType, accepts: Callable[[Any], bool], convert: Callable[[Any, str], Any]
) -> FieldConverter:
    """None stays None; a value `accepts` refuses is a TypeError naming the type and the JSON value."""

    def converter(value: Any, path: str) -> Any:
        if value is None:
            return None
        if accepts(value):
            return convert(value, path)
        raise TypeError(f"{path}: expected {t}, got JSON {json_kind(value)} {_short(value)}")

    return converter


def _map_converter(t: pa.MapType) -> Callable[[dict[str, Any], str], Any]:
    item = field_converter(t.item_type)
    string_keys = pa.types.is_string(t.key_type)

    def convert(value: dict[str, Any], path: str) -> Any:
        if not string_keys:
            raise TypeError(f"{path}: JSON objects only map to map<string,...>, not {t}")
        return [(k, item(v, f"{path}.{k}")) for k, v in value.items()]

    return convert


def _base64(value: str, path: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"{path}: not base64: {exc}") from exc


def _decimal(value: str | int | float, t: pa.Decimal128Type, path: str) -> decimal.Decimal:
    number = decimal.Decimal(str(value)) if not isinstance(value, str) else decimal.Decimal(value.strip())
    if not number.is_finite():
        raise ValueError(f"{path}: {value!r} is not a finite decimal")
    scaled = number.quantize(decimal.Decimal(1).scaleb(-t.scale))
    if scaled != number:
        raise ValueError(f"{path}: {value!r} has more than {t.scale} decimal places")
    if len(scaled.as_tuple().digits) > t.precision:
        raise ValueError(f"{path}: {value!r} has more than {t.precision} digits")
    return scaled


def _timestamp(value: str, t: pa.TimestampType, path: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise ValueError(f"{path}: {value!r} is not an ISO-8601 timestamp") from exc
    if t.tz is None:
        return parsed.replace(tzinfo=None)
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=dt.UTC)
    return parsed.astimezone(dt.UTC)


_KINDS = {
    type(None): "null",
    bool: "boolean",
    int: "number",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def json_kind(value: Any) -> str:
    """The JSON kind of a parsed value, for messages ("number", "array", ...)."""
    return _KINDS.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
