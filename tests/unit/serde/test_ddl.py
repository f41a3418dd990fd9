import pyarrow as pa
import pytest

from ethereal_kafka.serde import DdlError, parse_ddl, parse_type, spark_field_list, spark_type

UTC = "UTC"


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        ("long", pa.int64()),
        ("bigint", pa.int64()),
        ("INT", pa.int32()),
        ("integer", pa.int32()),
        ("short", pa.int16()),
        ("smallint", pa.int16()),
        ("byte", pa.int8()),
        ("tinyint", pa.int8()),
        ("double", pa.float64()),
        ("float", pa.float32()),
        ("string", pa.string()),
        ("varchar(10)", pa.string()),
        ("boolean", pa.bool_()),
        ("binary", pa.binary()),
        ("date", pa.date32()),
        ("timestamp", pa.timestamp("us", tz=UTC)),
        ("timestamp_ntz", pa.timestamp("us")),
        ("decimal(12, 3)", pa.decimal128(12, 3)),
        ("decimal", pa.decimal128(10, 0)),
        ("array<long>", pa.list_(pa.int64())),
        ("map<string, array<double>>", pa.map_(pa.string(), pa.list_(pa.float64()))),
        ("struct<a:int, `b c`:string>", pa.struct([("a", pa.int32()), ("b c", pa.string())])),
        ("struct<a int>", pa.struct([("a", pa.int32())])),
    ],
)
def test_parse_type(ddl: str, expected: pa.DataType) -> None:
    assert parse_type(ddl) == expected


def test_parse_field_list_with_quotes_comments_and_not_null() -> None:
    parsed = parse_ddl(
        "order_id long NOT NULL, `the ``odd`` name` string COMMENT 'x, y', nested struct<a:int>"
    )
    assert parsed == pa.struct(
        [
            ("order_id", pa.int64()),
            ("the `odd` name", pa.string()),
            ("nested", pa.struct([("a", pa.int32())])),
        ]
    )
    assert all(f.nullable for f in parsed)


def test_parse_whole_struct_type_and_a_field_named_struct() -> None:
    assert parse_ddl("struct<a:int>") == pa.struct([("a", pa.int32())])
    assert parse_ddl("struct string") == pa.struct([("struct", pa.string())])


@pytest.mark.parametrize(
    ("ddl", "match"),
    [
        ("", "no fields"),
        ("a", "unexpected end"),
        ("a long b string", "expected ','"),
        ("a lng", "unsupported Spark type 'lng'"),
        ("a array<long", "unexpected end"),
        ("a long, a string", "declared twice"),
        ("a decimal(40,2)", "out of range"),
        ("a long;", "unexpected character"),
    ],
)
def test_parse_errors(ddl: str, match: str) -> None:
    with pytest.raises(DdlError, match=match):
        parse_ddl(ddl)


def test_spark_ddl_round_trip() -> None:
    ddl = (
        "a bigint, b int, c smallint, d tinyint, e double, f float, g string, h boolean, i binary, j date, "
        "k timestamp, l timestamp_ntz, m decimal(9,2), n array<struct<x:int>>, o map<string,bigint>"
    )
    parsed = parse_ddl(ddl)
    rendered = spark_field_list(parsed)
    assert rendered.startswith("`a` bigint, `b` int")
    assert parse_ddl(rendered) == parsed
    assert spark_type(pa.string()) == "string"
    assert spark_field_list(pa.binary()) == "binary"


def test_spark_type_rejects_types_spark_lacks() -> None:
    with pytest.raises(DdlError, match="no Spark equivalent"):
        spark_type(pa.uint32())
