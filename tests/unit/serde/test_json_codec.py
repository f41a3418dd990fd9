import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from ethereal_kafka.errors import ConfigError
from ethereal_kafka.serde import SerdeError, SerdeSpec, build_codec
from ethereal_kafka.serde.json_codec import JsonCodec
from tests.unit.serde.conftest import decode

ORDER_DDL = "order_id long, customer string, amount double"
RICH_DDL = (
    "id bigint, small tinyint, ok boolean, ts timestamp, day date, price decimal(10,2), blob binary, "
    "tags array<string>, attrs map<string,int>, inner struct<x:double, `y z`:string>"
)


def orders(n: int) -> list[dict[str, Any]]:
    return [{"order_id": i, "customer": f"c{i % 7}", "amount": i * 1.25} for i in range(n)]


def test_round_trip_of_orders(field: str) -> None:
    spec = SerdeSpec(field, "json", spark_ddl=ORDER_DDL)
    expected = orders(50)
    raw = [json.dumps(o).encode() for o in expected]
    result = decode(spec, raw)
    assert not result.errors
    assert result.values.to_pylist() == expected
    encoded = build_codec(spec).encode(result.values, "t")
    assert [json.loads(e) for e in encoded if e is not None] == expected
    assert encoded[1] == b'{"order_id":1,"customer":"c1","amount":1.25}'


def test_the_vectorized_path_decodes_clean_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    original = JsonCodec._decode_records

    def forbidden(self: JsonCodec, records: list[bytes]) -> Any:
        assert not records, "fell back to per-record parsing"
        return original(self, records)

    monkeypatch.setattr(JsonCodec, "_decode_records", forbidden)
    raw = [json.dumps({**o, "extra": [1, 2]}).encode() for o in orders(20)] + [None]
    result = decode(SerdeSpec("value", "json", spark_ddl=ORDER_DDL), raw)
    assert result.values.to_pylist() == [*orders(20), None]


def test_bad_rows_get_errors_with_their_index_and_offset_and_the_rest_decodes() -> None:
    good = orders(6)
    raw: list[bytes | None] = [json.dumps(o).encode() for o in good]
    raw[1] = b'{"order_id": "one"}'  # wrong type
    raw[3] = b"not json"
    raw[4] = None  # a null value is not an error
    raw.append(b"[1, 2]")  # not an object
    raw.append(b"null")  # a JSON null is not an object either (and must not crash the Arrow reader)
    raw.append(b'{"order_id": 1.5}')  # lossy int
    raw.append(b'{"order_id": 9223372036854775808}')  # int64 overflow
    result = decode(SerdeSpec("value", "json", spark_ddl=ORDER_DDL), raw, topic="orders", partition=1)
    assert sorted(result.errors) == [1, 3, 6, 7, 8, 9]
    values = result.values.to_pylist()
    assert values[:6] == [good[0], None, good[2], None, None, good[5]]
    assert values[6:] == [None] * 4
    error = result.errors[3]
    assert (error.topic, error.partition, error.offset, error.raw) == ("orders", 1, 103, b"not json")
    assert error.cause_class == "JSONDecodeError" and error.field == "value"
    assert "expected int64, got JSON string" in result.errors[1].message
    assert "got JSON array" in result.errors[6].message
    assert "got JSON null" in result.errors[7].message
    assert "out of range" in result.errors[9].message


def test_fallback_and_vectorized_paths_agree() -> None:
    spec = SerdeSpec("value", "json", spark_ddl="a bigint, ts timestamp, d decimal(6,2), l array<double>")
    records = [
        b'{"a": 1, "ts": "2024-03-01T10:00:00Z", "d": "12.30", "l": [1, 2.5]}',
        b'{"a": 2, "ts": "2024-03-01T11:00:00+01:00", "d": 7}',
        b'{"ts": "2024-03-01 09:30:00.25"}',
        b' {"a": 4, "unknown": {"deep": true}} ',
    ]
    fast = decode(spec, records)
    slow = decode(spec, [*records, b"{bad"])
    assert not fast.errors and list(slow.errors) == [4]
    assert slow.values.to_pylist()[:4] == fast.values.to_pylist()
    utc = dt.UTC
    assert fast.values.to_pylist()[1]["ts"] == dt.datetime(2024, 3, 1, 10, 0, tzinfo=utc)
    assert fast.values.to_pylist()[2]["ts"] == dt.datetime(2024, 3, 1, 9, 30, 0, 250000, tzinfo=utc)
    assert fast.values.to_pylist()[0]["d"] == Decimal("12.30")


def test_pretty_printed_records_decode() -> None:
    record = {"order_id": 7, "customer": "x", "amount": 1.0}
    result = decode(SerdeSpec("key", "json", spark_ddl=ORDER_DDL), [json.dumps(record, indent=2).encode()])
    assert result.values.to_pylist() == [record] and not result.errors


def test_special_types_round_trip_and_their_json_form() -> None:
    spec = SerdeSpec("value", "json", spark_ddl=RICH_DDL)
    record = {
        "id": 1,
        "small": -3,
        "ok": True,
        "ts": "2024-01-02T03:04:05.123456Z",
        "day": "2024-01-02",
        "price": "19.90",
        "blob": "AAH/",
        "tags": ["a", None],
        "attrs": {"k": 1},
        "inner": {"x": 0.5, "y z": "w"},
    }
    line = json.dumps(record, separators=(",", ":")).encode()
    result = decode(spec, [line, b'{"id": 2}'])
    assert not result.errors
    first = result.values.to_pylist()[0]
    assert first["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
    assert first["day"] == dt.date(2024, 1, 2)
    assert first["price"] == Decimal("19.90")
    assert first["blob"] == b"\x00\x01\xff"
    assert first["attrs"] == [("k", 1)]
    encoded = build_codec(spec).encode(result.values, "t")
    assert encoded[0] == line
    assert json.loads(encoded[1]) == {name: None for name in record} | {"id": 2}


@pytest.mark.parametrize(
    ("record", "match"),
    [
        (b'{"small": 200}', "out of range"),
        (b'{"ok": 1}', "expected bool"),
        (b'{"price": "1.234"}', "more than 2 decimal places"),
        (b'{"price": "123456789.1"}', "more than 10 digits"),
        (b'{"blob": "***"}', "not base64"),
        (b'{"day": "yesterday"}', "Invalid isoformat"),
        (b'{"ts": 1700000000}', "expected timestamp"),
        (b'{"attrs": {"k": "v"}}', "attrs.k: expected int32"),
        (b'{"id": NaN}', "NaN is not valid JSON"),
        (b'{"id": 1', "Expecting"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_conversion_errors(record: bytes, match: str) -> None:
    result = decode(SerdeSpec("value", "json", spark_ddl=RICH_DDL), [b'{"id": 1}', record])
    assert list(result.errors) == [1]
    assert match in str(result.errors[1])
    assert result.values.to_pylist()[0]["id"] == 1


def test_encode_errors_name_the_row() -> None:
    codec = build_codec(SerdeSpec("value", "json", spark_ddl="a double"))
    with pytest.raises(SerdeError, match="row 2") as info:
        codec.encode(pa.array([{"a": 1.0}, None, {"a": float("nan")}]), "out")
    error = info.value
    assert (error.topic, error.offset, error.field, list(error.raw)) == ("out", None, "value", ["a"])
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(SerdeError, match="no field"):
        codec.encode(pa.array([{"b": 1.0}]), "out")
    with pytest.raises(SerdeError, match="struct, string or binary"):
        codec.encode(pa.array([1]), "out")


def test_encode_passes_strings_and_bytes_through_and_ignores_extra_fields() -> None:
    codec = build_codec(SerdeSpec("value", "json", spark_ddl="a int"))
    assert codec.encode(pa.array(['{"a":1}', None]), "t") == [b'{"a":1}', None]
    assert codec.encode(pa.array([b"{}"]), "t") == [b"{}"]
    assert codec.encode(pa.array([{"z": 1, "a": 2}]), "t") == [b'{"a":2}']


def test_json_needs_a_valid_schema() -> None:
    with pytest.raises(ConfigError, match=r"needs value\.schema"):
        build_codec(SerdeSpec("value", "json"))
    with pytest.raises(ConfigError, match="unsupported Spark type"):
        build_codec(SerdeSpec("value", "json", spark_ddl="a nope"))


def test_empty_and_all_null_batches() -> None:
    spec = SerdeSpec("key", "json", spark_ddl=ORDER_DDL)
    assert len(decode(spec, []).values) == 0
    result = decode(spec, [None, None])
    assert result.values.to_pylist() == [None, None] and not result.errors
    assert result.values.type == build_codec(spec).arrow_type()


def test_scattered_bad_rows_in_a_large_batch_match_a_plain_python_reference() -> None:
    rows = orders(2000)
    bad_at = {0, 17, 18, 999, 1500, 1999}
    raw = [b'{"order_id": "bad"}' if i in bad_at else json.dumps(r).encode() for i, r in enumerate(rows)]
    raw[700] = None
    result = decode(SerdeSpec("value", "json", spark_ddl=ORDER_DDL), raw)
    expected = [None if i in bad_at or i == 700 else r for i, r in enumerate(rows)]
    assert result.values.to_pylist() == expected
    assert set(result.errors) == bad_at
    assert all(result.errors[i].offset == 100 + i for i in bad_at)
