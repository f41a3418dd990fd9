"""Python per-element operators over Arrow batches keep each row's hidden columns and check output types."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from ethereal_kafka.plan.pyfuncs import PyStage, UserFunctionError

HIDDEN = ("__part", "__off")
HIDDEN_TYPES = (pa.int32(), pa.int64())


def _batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "line": ["a b", "", "c"],
            "__part": pa.array([0, 0, 1], pa.int32()),
            "__off": pa.array([10, 11, 5], pa.int64()),
        }
    )


def _stage(kind: str, function, out: pa.StructType) -> PyStage:  # type: ignore[no-untyped-def]
    return PyStage(f"{kind}#1", kind, function, ("line",), out, HIDDEN, HIDDEN_TYPES)


def test_flat_map_repeats_each_input_rows_hidden_columns() -> None:
    out = pa.struct([pa.field("word", pa.string())])
    stage = _stage("flat_map", lambda e: [{"word": w} for w in e["line"].split()], out)
    (result,) = list(stage([_batch()]))
    assert result.to_pydict() == {"word": ["a", "b", "c"], "__part": [0, 0, 1], "__off": [10, 10, 5]}


def test_filter_and_map() -> None:
    same = pa.struct([pa.field("line", pa.string())])
    (kept,) = list(_stage("filter", lambda e: bool(e["line"]), same)([_batch()]))
    assert kept.column("__off").to_pylist() == [10, 5]
    length = pa.struct([pa.field("n", pa.int64())])
    (mapped,) = list(_stage("map", lambda e: {"n": len(e["line"])}, length)([_batch()]))
    assert mapped.column("n").to_pylist() == [3, 0, 1]


def test_a_computed_hidden_column() -> None:
    same = pa.struct([pa.field("line", pa.string())])
    stage = PyStage(
        "key_by#1",
        "column",
        lambda e: e["line"][:1],
        ("line",),
        same,
        (*HIDDEN, "__key"),
        (*HIDDEN_TYPES, pa.string()),
        target="__key",
        target_type=pa.string(),
    )
    (result,) = list(stage([_batch()]))
    assert result.column("__key").to_pylist() == ["a", "", "c"]


def test_errors_name_the_operator_and_the_record() -> None:
    out = pa.struct([pa.field("n", pa.int64())])

    def fails(e: dict[str, Any]) -> dict[str, Any]:
        return {"n": 1 // len(e["line"])}

    with pytest.raises(UserFunctionError) as caught:
        list(_stage("map", fails, out)([_batch()]))
    line = fails.__code__.co_firstlineno + 1
    assert str(caught.value) == (
        f"operator map#1 at test_pyfuncs.py:{line}: ZeroDivisionError: integer division or modulo by zero; "
        "element from partition 0 offset 11"
    )
    assert caught.value.location is not None and caught.value.location.path == __file__
    with pytest.raises(UserFunctionError, match="does not fit its output type"):
        list(_stage("map", lambda e: {"n": "not a number"}, out)([_batch()]))
    with pytest.raises(UserFunctionError, match="must return dicts"):
        list(_stage("map", lambda e: 42, out)([_batch()]))
