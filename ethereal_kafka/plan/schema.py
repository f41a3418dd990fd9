"""Columns and types of compiled streams: the user's fields plus the framework's hidden columns.

Hidden columns (names start with `__`; never shown to user functions, never written to sinks):

- `__part`, `__off` — the source partition and offset of the record an element came from: with `__ts`, the
  deterministic order in which keyed operators process a key's elements within an epoch.
- `__rts` — the Kafka timestamp of the record an element came from: the event time of a watermark strategy that
  names no field while the source hands the pipeline no `timestamp` field (`metadata.columns`).
- `__ts` — event time (timestamp), from `assign_timestamps_and_watermarks`, or the window's last instant after a
  window.
- `__key` — the key, after `key_by`.
- `__tag` — for operators with side outputs: null on main-output rows, the tag's name on side-output rows, whose
  fields are in the struct column `__side_<tag>`.
- `__seq` — after a framework operator: the row's position in the operator's output (deterministic: a key's rows
  come out in the order the operator emitted them). The exactly-once sink sorts each task's records by key, then
  `__seq`, so a key's records reach Kafka in emission order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.serde.ddl import DdlError, parse_ddl, spark_field_list

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

PART = "__part"
OFFSET = "__off"
TS = "__ts"
RECORD_TS = "__rts"
KEY = "__key"
TAG = "__tag"
SEQ = "__seq"
SIDE_PREFIX = "__side_"

#: Hidden columns in the order they follow the user's fields.
HIDDEN = (PART, OFFSET, TS, KEY)


def is_hidden(name: str) -> bool:
    """True for framework columns (`__...`)."""
    return name.startswith("__")


def side_column(tag_name: str) -> str:
    """The struct column holding side output `tag_name`'s fields."""
    return f"{SIDE_PREFIX}{tag_name}"


def arrow_struct(ddl: str, where: str) -> pa.StructType:
    """Parse a Spark DDL field list (`"word string, n long"`) into an Arrow struct.

    Raises:
        GraphError: the DDL is invalid (the message names the operator).
    """
    try:
        struct = parse_ddl(ddl)
    except DdlError as exc:
        raise GraphError(f"{where}: output type {ddl!r} is not valid Spark DDL: {exc}") from exc
    for field in struct:
        if is_hidden(field.name):
            raise GraphError(f"{where}: field {field.name!r}: names starting with '__' are reserved")
    return struct


def spark_struct(arrow: pa.StructType | pa.Schema) -> StructType:
    """The Spark StructType of Arrow fields (no JVM needed)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = arrow if isinstance(arrow, pa.Schema) else pa.schema(list(arrow))
    return from_arrow_schema(schema)


def arrow_of(spark_schema: Any) -> pa.Schema:
    """The Arrow schema Spark uses for a StructType (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


def ddl_of(arrow: pa.StructType | pa.Schema) -> str:
    """A Spark DDL field list for Arrow fields."""
    struct = arrow if isinstance(arrow, pa.StructType) else pa.struct(list(arrow))
    return spark_field_list(struct)


def user_fields(columns: list[str]) -> list[str]:
    """The non-hidden column names, in order."""
    return [c for c in columns if not is_hidden(c)]
