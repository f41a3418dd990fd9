"""The column-wise JSON encoder writes exactly the bytes of the row-by-row path, on random batches of every type."""

from __future__ import annotations

import datetime as dt
import random
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from ethereal_kafka.serde import SerdeError, SerdeSpec, build_codec
from ethereal_kafka.serde.json_codec import JsonCodec

Gen = Callable[[random.Random], Any]

_TEXT = 'aZ09 "\\/\n\r\t\b\f\x00\x01\x1f\x7f\u00e9\u2028\u2029\ufeff\U0001f600\u4e2d'


def _text(r: random.Random) -> str:
    return "".join(r.choice(_TEXT) for _ in range(r.randint(0, 12)))


def _float(r: random.Random) -> float:
    kind = r.randint(0, 5)
    if kind == 0:
        while True:  # any finite double, from its bits
            value: float = struct.unpack("d", r.getrandbits(64).to_bytes(8, "little"))[0]
            if value == value and abs(value) != float("inf"):
                return value
    if kind == 1:
        return r.choice([0.0, -0.0, 1e16, 1e-4, 9.999e-5, 5e-324, 1.7976931348623157e308, 1e15, 0.1])
    if kind == 2:
        return r.uniform(-1, 1) * 10 ** r.randint(-12, 24)
    return round(r.uniform(-1e4, 1e4), r.randint(0, 6))


def _timestamp(r: random.Random) -> dt.datetime:
    micros = r.randint(-62135596800 * 10**6 // 2, 253402300799 * 10**6 // 2)
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)


# Arrow type -> value generator (a value of that type as pa.array accepts it).
SCALARS: dict[pa.DataType, Gen] = {
    pa.int8(): lambda r: r.randint(-128, 127),
    pa.int16(): lambda r: r.randint(-(2**15), 2**15 - 1),
    pa.int32(): lambda r: r.randint(-(2**31), 2**31 - 1),
    pa.int64(): lambda r: r.randint(-(2**63), 2**63 - 1),
    pa.uint64(): lambda r: r.randint(0, 2**64 - 1),
    pa.bool_(): lambda r: r.random() < 0.5,
    pa.float32(): lambda r: r.uniform(-1e6, 1e6) * 10 ** r.randint(-9, 3),
    pa.float64(): _float,
    pa.string(): _text,
    pa.large_string(): _text,
    pa.binary(): lambda r: r.randbytes(r.randint(0, 9)),
    pa.large_binary(): lambda r: r.randbytes(r.randint(0, 9)),
    pa.binary(3): lambda r: r.randbytes(3),
    pa.date32(): lambda r: dt.date(1, 1, 2) + dt.timedelta(days=r.randint(0, 3_652_055)),
    pa.timestamp("us", tz="UTC"): _timestamp,
    pa.timestamp("us", tz="Europe/Paris"): _timestamp,
    pa.timestamp("ms", tz="+05:30"): lambda r: _timestamp(r).replace(microsecond=r.randint(0, 999) * 1000),
    pa.timestamp("s", tz="UTC"): lambda r: _timestamp(r).replace(microsecond=0),
    pa.timestamp("us"): lambda r: _timestamp(r).replace(tzinfo=None),
    pa.decimal128(10, 2): lambda r: Decimal(r.randint(-(10**10) + 1, 10**10 - 1)).scaleb(-2),
    # Any magnitude: Arrow writes small ones (and zero) in exponent form, "1E-10", which JSON must not get.
    pa.decimal128(38, 10): lambda r: Decimal(
        r.randint(-(10 ** r.randint(0, 12)), 10 ** r.randint(0, 12))
    ).scaleb(-10),
    pa.decimal128(5, 0): lambda r: Decimal(r.randint(-99999, 99999)),
}

INNER = pa.struct([("x", pa.float64()), ("y z", pa.string()), ("t", pa.timestamp("us", tz="UTC"))])
NESTED: list[pa.DataType] = [
    pa.list_(pa.float64()),
    pa.list_(pa.string()),
    pa.large_list(pa.int64()),
    pa.list_(pa.list_(pa.decimal128(10, 2))),
    pa.map_(pa.string(), pa.int32()),
    pa.map_(pa.int32(), pa.float64()),
    pa.map_(pa.string(), INNER),
    INNER,
    pa.list_(INNER),
    pa.struct([("inner", INNER), ("blob", pa.binary()), ("day", pa.date32())]),
]


def value_of(t: pa.DataType, r: random.Random, nulls: float = 0.15) -> Any:
    """A random value of `t` (None with probability `nulls`, at every level)."""
    if r.random() < nulls or pa.types.is_null(t):
        return None
    if t in SCALARS:
        return SCALARS[t](r)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [value_of(t.value_type, r) for _ in range(r.randint(0, 4))]
    if pa.types.is_map(t):
        keys = {value_of(t.key_type, r, nulls=0) for _ in range(r.randint(0, 4))}
        return [(k, value_of(t.item_type, r)) for k in keys]
    if pa.types.is_struct(t):
        return {f.name: value_of(f.type, r) for f in t}
    raise AssertionError(f"no generator for {t}")


def row_by_row(monkeypatch: pytest.MonkeyPatch, codec: JsonCodec, values: pa.Array) -> list[bytes | None]:
    """The encoding without the column-wise plan: the codec's row-by-row path (the encoder before the plan)."""
    with monkeypatch.context() as patch:
        patch.setattr(JsonCodec, "_encode_planned", lambda self, values: None)
        return codec.encode(values, "t")


def random_batch(types: list[pa.DataType], r: random.Random, rows: int) -> pa.StructArray:
    fields = [pa.field(f"c{i}", t) for i, t in enumerate(types)]
    data = [None if r.random() < 0.1 else {f.name: value_of(f.type, r) for f in fields} for _ in range(rows)]
    batch = pa.array(data, pa.struct(fields))
    start = r.randint(0, 5)  # a slice, so every converter meets a non-zero offset
    return batch.slice(start, rows - start - r.randint(0, 5))


def codec_for(values: pa.Array, declared: list[str]) -> JsonCodec:
    """A codec declaring `declared`; encoding takes the fields' types from the column, so the DDL only names them."""
    del values
    ddl = ", ".join(f"`{name}` string" for name in declared)
    codec = build_codec(SerdeSpec("value", "json", spark_ddl=ddl))
    assert isinstance(codec, JsonCodec)
    return codec


@pytest.mark.parametrize("seed", range(6))
def test_random_batches_of_every_type_encode_to_the_row_by_row_bytes(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = random.Random(seed)
    types = list(SCALARS) + NESTED
    r.shuffle(types)
    values = random_batch(types, r, rows=300)
    names = [f.name for f in values.type]
    declared = r.sample(names, len(names) - 3)  # extra columns are ignored; declared order wins
    codec = codec_for(values, declared)
    planned = codec._encode_planned(values)
    assert planned is not None, "the plan fell back on finite, in-range data"
    assert planned == row_by_row(monkeypatch, codec, values)
    assert codec.encode(values, "t") == planned


@pytest.mark.parametrize("t", [*SCALARS, *NESTED, pa.null()], ids=str)
def test_each_type_alone_with_nulls_and_all_null_batches(
    t: pa.DataType, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = random.Random(str(t))
    for nulls in (0.0, 0.3, 1.0):
        column = pa.array([value_of(t, r, nulls) for _ in range(200)], t)
        values = pa.StructArray.from_arrays([column, column.slice(0, 200)], names=["v", "w"])
        codec = codec_for(values, ["w", "v"])
        planned = codec._encode_planned(values)
        assert planned is not None
        assert planned == row_by_row(monkeypatch, codec, values)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("nest", ["flat", "list", "struct", "map"])
def test_non_finite_floats_raise_the_same_error_naming_the_same_row(
    bad: float, nest: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    floats = [1.5, None, 2.5, bad, 3.0, bad]
    if nest == "flat":
        column = pa.array(floats, pa.float64())
    elif nest == "list":
        column = pa.array([[v] for v in floats], pa.list_(pa.float64()))
    elif nest == "struct":
        column = pa.array([{"x": v} for v in floats], pa.struct([("x", pa.float64())]))
    else:
        column = pa.array([[("k", v)] for v in floats], pa.map_(pa.string(), pa.float64()))
    values = pa.StructArray.from_arrays([pa.array(range(6)), column], names=["a", "b"])
    codec = codec_for(values, ["a", "b"])
    with pytest.raises(SerdeError) as fast:
        codec.encode(values, "t")
    with pytest.raises(SerdeError) as slow:
        row_by_row(monkeypatch, codec, values)
    assert str(fast.value) == str(slow.value) and "row 3" in str(fast.value)
    assert type(fast.value.__cause__) is type(slow.value.__cause__)


def test_timestamps_and_dates_at_the_ends_of_the_range_and_other_types_go_row_by_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cases = [
        pa.array([dt.datetime(1, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 1, tzinfo=dt.UTC)]),
        pa.array([dt.datetime(9999, 12, 31, 23, 59, 59, 999999)]),
        pa.array([dt.date(1, 1, 1), dt.date(9999, 12, 31)]),
        pa.array([1, 2], pa.timestamp("ns", tz="UTC")),
        pa.array([1, 2], pa.time64("us")),
        pa.array(["a", "b"]).dictionary_encode(),
        pa.array([[1.0, 2.0]], pa.list_(pa.float64(), 2)),
    ]
    for column in cases:
        values = pa.StructArray.from_arrays([column], names=["v"])
        codec = codec_for(values, ["v"])
        assert codec._encode_planned(values) is None
        try:
            expected: Any = row_by_row(monkeypatch, codec, values)
        except SerdeError as exc:
            expected = str(exc)
        try:
            actual: Any = codec.encode(values, "t")
        except SerdeError as exc:
            actual = str(exc)
        assert actual == expected


def test_float_forms_match_python_repr() -> None:
    floats = [1e16, 1e-5, 1.5e-7, -2.5e300, 1e15, 1e-4, 0.0, -0.0, 123.456, 5e-324]
    values = pa.StructArray.from_arrays([pa.array(floats)], names=["x"])
    encoded = codec_for(values, ["x"]).encode(values, "t")
    assert encoded == [f'{{"x":{f!r}}}'.encode() for f in floats]
    assert encoded[0] == b'{"x":1e+16}' and encoded[1] == b'{"x":1e-05}'
