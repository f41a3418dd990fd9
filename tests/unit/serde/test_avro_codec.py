import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from ethereal_kafka.errors import ConfigError
from ethereal_kafka.serde import SerdeError, SerdeSpec, build_codec
from tests.unit.serde.conftest import ORDER_V1, ORDER_V2, decode

V1_ROWS = [{"order_id": i, "customer": f"c{i}", "amount": i / 4} for i in range(5)]


def test_schemaless_round_trip(field: str) -> None:
    spec = SerdeSpec(field, "avro", schema_file=ORDER_V1)
    codec = build_codec(spec)
    assert codec.spark_ddl() == "`order_id` bigint, `customer` string, `amount` double"
    encoded = codec.encode(pa.array([*V1_ROWS, None]), "t")
    assert encoded[-1] is None
    result = decode(spec, encoded)
    assert not result.errors
    assert result.values.to_pylist() == [*V1_ROWS, None]


def test_v1_writer_read_with_v2_reader_gets_the_default() -> None:
    encoded = build_codec(SerdeSpec("value", "avro", schema_file=ORDER_V1)).encode(pa.array(V1_ROWS), "t")
    reader = SerdeSpec("value", "avro", schema_file=ORDER_V2, writer_schema_file=ORDER_V1)
    result = decode(reader, encoded)
    assert not result.errors
    assert result.values.to_pylist() == [{**row, "currency": "EUR"} for row in V1_ROWS]


def test_v2_writer_read_with_v1_reader_drops_the_new_field() -> None:
    v2_rows = [{**row, "currency": "USD"} for row in V1_ROWS]
    encoded = build_codec(SerdeSpec("value", "avro", schema_file=ORDER_V2)).encode(pa.array(v2_rows), "t")
    reader = SerdeSpec("value", "avro", schema_file=ORDER_V1, writer_schema_file=ORDER_V2)
    result = decode(reader, encoded)
    assert not result.errors
    assert result.values.to_pylist() == V1_ROWS


def test_encoding_v1_rows_with_v2_fills_the_default() -> None:
    codec = build_codec(SerdeSpec("value", "avro", schema_file=ORDER_V2))
    result = decode(
        SerdeSpec("value", "avro", schema_file=ORDER_V2), codec.encode(pa.array(V1_ROWS[:1]), "t")
    )
    assert result.values.to_pylist() == [{**V1_ROWS[0], "currency": "EUR"}]


def test_malformed_payloads_are_errors_of_their_rows() -> None:
    spec = SerdeSpec("value", "avro", schema_file=ORDER_V1)
    good = build_codec(spec).encode(pa.array(V1_ROWS[:2]), "t")
    raw = [good[0], good[0][:4], None, good[1] + b"\x00", b"", good[1]]
    result = decode(spec, raw, topic="orders", partition=0)
    assert sorted(result.errors) == [1, 3, 4]
    assert result.values.to_pylist() == [V1_ROWS[0], None, None, None, None, V1_ROWS[1]]
    assert "truncated" in result.errors[1].message and result.errors[1].offset == 101
    assert "1 trailing byte" in result.errors[3].message and result.errors[3].raw == good[1] + b"\x00"


def test_logical_types_round_trip(tmp_path: Path) -> None:
    schema = {
        "type": "record",
        "name": "Rich",
        "fields": [
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2},
            },
            {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
            {"name": "fx", "type": {"type": "fixed", "name": "Two", "size": 2}},
            {"name": "tags", "type": {"type": "map", "values": "long"}},
            {"name": "list", "type": {"type": "array", "items": "string"}},
            {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "at", "type": {"type": "long", "logicalType": "time-micros"}},
        ],
    }
    path = tmp_path / "rich.avsc"
    path.write_text(json.dumps(schema))
    spec = SerdeSpec("value", "avro", schema_file=str(path))
    codec = build_codec(spec)
    row = {
        "ts": dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.UTC),
        "day": dt.date(2024, 5, 6),
        "price": Decimal("12.34"),
        "color": "GREEN",
        "fx": b"ab",
        "tags": [("x", 1)],
        "list": ["p", "q"],
        "uid": str(uuid.UUID(int=7)),
        "at": 3_600_000_001,
    }
    values = pa.array([row, {**row, "day": None}], type=codec.arrow_type())
    result = decode(spec, codec.encode(values, "t"))
    assert not result.errors
    assert result.values.to_pylist() == values.to_pylist()
    assert "`ts` timestamp" in codec.spark_ddl() and "`price` decimal(8,2)" in codec.spark_ddl()


def test_encode_errors_name_the_row() -> None:
    codec = build_codec(SerdeSpec("key", "avro", schema_file=ORDER_V1))
    bad = pa.array([V1_ROWS[0], {"order_id": 1, "customer": None, "amount": 1.0}])
    with pytest.raises(SerdeError, match="row 1") as info:
        codec.encode(bad, "t")
    assert info.value.field == "key" and info.value.cause_class is not None


def test_bad_avro_configuration() -> None:
    with pytest.raises(ConfigError, match=r"needs value\.schema\.file or schema\.registry\.url"):
        build_codec(SerdeSpec("value", "avro"))
    with pytest.raises(ConfigError, match="No such file"):
        build_codec(SerdeSpec("value", "avro", schema_file="/nonexistent.avsc"))
    with pytest.raises(ConfigError, match="not a valid Avro schema"):
        build_codec(SerdeSpec("value", "avro", schema_text='{"type": "record"}'))
    with pytest.raises(ConfigError, match="non-null branches"):
        build_codec(SerdeSpec("value", "avro", schema_text='["int", "string"]'))
