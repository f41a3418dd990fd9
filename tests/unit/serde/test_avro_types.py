import pyarrow as pa
import pytest

from ethereal_kafka.serde import avro_to_arrow
from ethereal_kafka.serde.types import AvroTypeError

UTC = "UTC"


def test_avro_type_mapping() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "namespace": "ns",
        "fields": [
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "l", "type": ["null", "long"]},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "s", "type": ["string", "null"]},
            {"name": "raw", "type": "bytes"},
            {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
            {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
            {"name": "arr", "type": {"type": "array", "items": "Color"}},
            {"name": "m", "type": {"type": "map", "values": "ns.Four"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "odd", "type": {"type": "long", "logicalType": "something-new"}},
            {
                "name": "inner",
                "type": [
                    "null",
                    {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "long"}]},
                ],
            },
            {"name": "again", "type": "Inner"},
        ],
    }
    inner = pa.struct([("x", pa.int64())])
    assert avro_to_arrow(schema) == pa.struct(
        [
            ("b", pa.bool_()),
            ("i", pa.int32()),
            ("l", pa.int64()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("s", pa.string()),
            ("raw", pa.binary()),
            ("e", pa.string()),
            ("fx", pa.binary()),
            ("arr", pa.list_(pa.string())),
            ("m", pa.map_(pa.string(), pa.binary())),
            ("day", pa.date32()),
            ("ms", pa.timestamp("us", tz=UTC)),
            ("us", pa.timestamp("us", tz=UTC)),
            ("local", pa.timestamp("us")),
            ("dec", pa.decimal128(9, 2)),
            ("uid", pa.string()),
            ("t", pa.int64()),
            ("odd", pa.int64()),
            ("inner", inner),
            ("again", inner),
        ]
    )


def test_primitive_top_level_schemas() -> None:
    assert avro_to_arrow("string") == pa.string()
    assert avro_to_arrow({"type": "long"}) == pa.int64()


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        (["int", "string"], "2 non-null branches"),
        (
            {"type": "record", "name": "R", "fields": [{"name": "x", "type": "Missing"}]},
            "unknown type 'Missing'",
        ),
        ({"type": "record", "name": "E", "fields": []}, "no fields"),
    ],
)
def test_unsupported_constructs(schema: object, match: str) -> None:
    with pytest.raises(AvroTypeError, match=match):
        avro_to_arrow(schema)
