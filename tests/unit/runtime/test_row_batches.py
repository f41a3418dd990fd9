"""`runtime.row_batches`: a transformWithState task's input batches, converted column by column, give every value
exactly as PySpark's cell-by-cell conversion does; only that eval type is wrapped."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.util import PythonEvalType

from ethereal_kafka.runtime import row_batches
from ethereal_kafka.runtime.row_batches import ColumnarBatch, install


def _batch() -> pa.RecordBatch:
    """Every kind of column a row can hold, nulls included."""
    return pa.RecordBatch.from_pydict(
        {
            "n": pa.array([1, None, -3], pa.int64()),
            "i": pa.array([1, 2, None], pa.int32()),
            "f": pa.array([1.5, None, float("inf")], pa.float32()),
            "d": pa.array([0.1, 2.0, None], pa.float64()),
            "b": pa.array([True, None, False]),
            "s": pa.array(["a", None, "ü"]),
            "raw": pa.array([b"\x00", None, b"xy"], pa.binary()),
            "ts": pa.array([0, 1_700_000_000_123_456, None], pa.timestamp("us")),
            "tz": pa.array([0, 5, None], pa.timestamp("us", tz="UTC")),
            "day": pa.array([dt.date(2026, 1, 1), None, dt.date(1970, 1, 2)]),
            "dec": pa.array([Decimal("1.10"), None, Decimal("-2.00")], pa.decimal128(10, 2)),
            "list": pa.array([[1, 2], None, []], pa.list_(pa.int64())),
            "struct": pa.array([{"a": 1, "b": "x"}, None, {"a": None, "b": "y"}]),
            "map": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())),
        }
    )


def _typed(value: Any) -> Any:
    """A value with its type, so that 1 and 1.0 or True and 1 differ."""
    if isinstance(value, dict):
        return ("dict", sorted((k, _typed(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(v) for v in value])
    return (type(value).__name__, repr(value))


def test_every_value_is_what_the_arrow_scalar_gives() -> None:
    batch = _batch()
    columnar = ColumnarBatch(batch)
    assert (columnar.schema, columnar.num_columns, columnar.num_rows) == (
        batch.schema,
        batch.num_columns,
        batch.num_rows,
    )
    for i in range(batch.num_columns):
        for row in range(batch.num_rows):
            want = _typed(batch.column(i)[row].as_py())
            assert _typed(columnar.column(i)[row].as_py()) == want, (batch.schema.names[i], row)
            assert _typed(columnar[i][row].as_py()) == want
    assert columnar.nbytes == batch.nbytes, "anything else is the Arrow batch's"
    with pytest.raises(AttributeError):
        columnar.column(0).to_numpy()  # type: ignore[attr-defined]  # a column offers indexing only


def test_install_wraps_the_row_based_transform_with_state_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark.worker as worker

    seen: list[list[Any]] = []

    def func(split_index: int, batches: Any) -> list[Any]:
        found = list(batches)
        seen.append(found)
        return found

    def read_udfs(pickle_ser: Any, udf_info: Any, eval_type: int, *rest: Any) -> tuple[Any, ...]:
        return func, None, "deserializer", "serializer"

    monkeypatch.setattr(worker, "read_udfs", read_udfs)
    assert install() and install(), "wrapped once, then left as it is"
    wrapped = worker.read_udfs
    assert getattr(wrapped, row_batches._MARK)
    batch = _batch()
    row_func, profiler, *serde = wrapped(
        None, None, PythonEvalType.SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_UDF, {}, {}
    )
    assert (profiler, serde) == (None, ["deserializer", "serializer"])
    (got,) = row_func(0, iter([batch]))
    assert isinstance(got, ColumnarBatch)
    other, *_ = wrapped(None, None, PythonEvalType.SQL_MAP_ARROW_ITER_UDF, {}, {})
    assert other is func
    assert other(0, iter([batch])) == [batch], "another eval type gets the Arrow batches"
