"""`Codec.spark_ddl()` must be a schema string Spark itself accepts (needs the local SparkSession, no broker)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from ethereal_kafka.serde import SerdeSpec, build_codec, parse_ddl
from tests.unit.serde.conftest import ORDER_V2

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

DDL = (
    "id long, small byte, ok boolean, ts timestamp, ntz timestamp_ntz, day date, price decimal(10,2), "
    "blob binary, tags array<string>, attrs map<string,int>, `odd name` struct<x:double, `y``z`:string>"
)


def test_spark_parses_the_ddl_of_every_codec(spark: SparkSession) -> None:
    from pyspark.sql.types import StructType

    codecs = [
        build_codec(SerdeSpec("value", "json", spark_ddl=DDL)),
        build_codec(SerdeSpec("value", "avro", schema_file=ORDER_V2)),
    ]
    for codec in codecs:
        ddl = codec.spark_ddl()
        parsed = StructType.fromDDL(ddl)
        assert parsed.fieldNames() == [f.name for f in codec.arrow_type()]
        # Spark's rendering of each field type parses back to the same Arrow type (simpleString does not quote
        # names, so nested odd names are skipped).
        for spark_field, arrow_field in zip(parsed.fields, codec.arrow_type(), strict=True):
            if "`" not in arrow_field.name and arrow_field.name != "odd name":
                rendered = f"`x` {spark_field.dataType.simpleString()}"
                assert parse_ddl(rendered).field(0).type == arrow_field.type
        frame = spark.createDataFrame([], ddl)
        assert frame.schema == parsed
    for simple in ("binary", "string"):
        assert build_codec(SerdeSpec("key", simple if simple == "string" else "bytes")).spark_ddl() == simple
    assert pa.types.is_struct(codecs[0].arrow_type())
