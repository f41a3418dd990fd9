"""Serialization of Kafka keys and values: `bytes`, `string`, `json` (typed by a Spark DDL) and `avro` (schemaless
with a local .avsc, or the Confluent wire format with a schema registry).

The connectors build a `SerdeSpec` per field on the driver (`SerdeSpec.from_settings`), ship it to executors and
call `build_codec(spec)` there; the resulting `Codec` decodes Arrow batches of raw bytes into typed Arrow arrays, with
per-row `SerdeError`s for bad records, and encodes typed columns back to bytes. Nothing here needs a JVM.
"""

from ethereal_kafka.serde.base import Codec, DecodeResult
from ethereal_kafka.serde.codecs import build_codec, pin_schema
from ethereal_kafka.serde.ddl import DdlError, parse_ddl, parse_type, spark_field_list, spark_type
from ethereal_kafka.serde.errors import RegistryError, SerdeError
from ethereal_kafka.serde.spec import SerdeSpec
from ethereal_kafka.serde.types import avro_to_arrow

__all__ = [
    "Codec",
    "DdlError",
    "DecodeResult",
    "RegistryError",
    "SerdeError",
    "SerdeSpec",
    "avro_to_arrow",
    "build_codec",
    "parse_ddl",
    "parse_type",
    "pin_schema",
    "spark_field_list",
    "spark_type",
]
