import pyarrow as pa
import pytest

from ethereal_kafka.serde import SerdeError, SerdeSpec, build_codec
from tests.unit.serde.conftest import decode


def test_bytes_round_trip(field: str) -> None:
    raw = [b"\x00\xff", None, b""]
    spec = SerdeSpec(field, "bytes")
    result = decode(spec, raw)
    assert result.values.type == pa.binary() and result.values.to_pylist() == raw and not result.errors
    assert build_codec(spec).encode(result.values, "t") == raw
    assert build_codec(spec).spark_ddl() == "binary"


def test_string_round_trip(field: str) -> None:
    spec = SerdeSpec(field, "string")
    result = decode(spec, ["héllo".encode(), None, b""])
    assert result.values.to_pylist() == ["héllo", None, ""] and not result.errors
    assert build_codec(spec).encode(result.values, "t") == ["héllo".encode(), None, b""]
    assert build_codec(spec).spark_ddl() == "string"


def test_invalid_utf8_is_an_error_of_its_row_only(field: str) -> None:
    result = decode(SerdeSpec(field, "string"), [b"ok", b"\xff\xfe", None], topic="orders", partition=2)
    assert result.values.to_pylist() == ["ok", None, None]
    assert list(result.errors) == [1]
    error = result.errors[1]
    assert (error.field, error.topic, error.partition, error.offset, error.raw) == (
        field,
        "orders",
        2,
        101,
        b"\xff\xfe",
    )
    assert error.cause_class == "UnicodeDecodeError"


def test_encode_rejects_other_column_types() -> None:
    with pytest.raises(SerdeError, match="row 0"):
        build_codec(SerdeSpec("value", "string")).encode(pa.array([1, 2]), "t")
