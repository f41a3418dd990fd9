"""Per-element Python functions over Arrow batches (`mapInArrow` bodies), keeping the hidden columns.

A `PyStage` is a frozen, picklable description built on the driver; Spark ships it to executors and calls it with
each partition's Arrow batches. User functions see elements as dicts of their user fields only; the hidden columns
of an input row (its source position, event time, key) follow each output element produced from it. Partitioning is
unchanged (no shuffle), so a job made only of these stays partition-preserving.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ethereal_kafka.errors import EtherealKafkaError


class UserFunctionError(EtherealKafkaError):
    """A user function raised, or returned something that does not fit its declared output type.

    Raised inside a Spark task; the message names the operator and the element's source partition and offset.
    The query fails (the epoch is not committed) and is retried from the same offsets on restart.
    """


def user_then_hidden(
    user_out: pa.StructType, hidden: tuple[str, ...], hidden_types: tuple[pa.DataType, ...]
) -> pa.Schema:
    """The schema a Python stage writes: the function's fields, then the hidden columns it carries through."""
    return pa.schema([*list(user_out), *[pa.field(n, t) for n, t in zip(hidden, hidden_types, strict=True)]])


@dataclass(frozen=True)
class PyStage:
    """One Python operator applied per element.

    Attributes:
        label: The operator's name for messages (`map#3`).
        kind: `map`, `flat_map`, `filter`, or `column` (compute one hidden column: `target`).
        function: The user's function.
        user_in: The input's user fields (what the function sees).
        user_out: The output's user fields, as an Arrow struct (for `filter`/`column`: the input's).
        hidden: The hidden columns, carried from each input row (for `column`: including `target`).
        target: For `column`: the hidden column to compute, and its Arrow type in `target_type`.
    """

    label: str
    kind: str
    function: Callable[[dict[str, Any]], Any]
    user_in: tuple[str, ...]
    user_out: pa.StructType
    hidden: tuple[str, ...]
    hidden_types: tuple[pa.DataType, ...]
    target: str = ""
    target_type: pa.DataType | None = None
    target_convert: Callable[[Any], Any] | None = None

    def output_schema(self) -> pa.Schema:
        """User fields, then hidden columns."""
        return user_then_hidden(self.user_out, self.hidden, self.hidden_types)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Apply the function to every row of every batch (runs in a Spark task)."""
        schema = self.output_schema()
        for batch in batches:
            if batch.num_rows == 0:
                continue
            yield self._apply(batch, schema)

    def _apply(self, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
        names = batch.schema.names
        elements = pa.Table.from_batches([batch.select(list(self.user_in))]).to_pylist()
        rows: list[dict[str, Any]] = []
        sources: list[int] = []
        computed: list[Any] = []
        for i, element in enumerate(elements):
            try:
                produced = self._call(element, computed)
            except UserFunctionError:
                raise
            except Exception as exc:
                raise UserFunctionError(
                    f"{self.label} failed on the element from {_origin(batch, i)}: {exc!r}"
                ) from exc
            for out in produced:
                rows.append(out)
                sources.append(i)
        indices = pa.array(sources, pa.int64())
        columns: list[pa.Array] = []
        try:
            user = pa.Table.from_pylist(rows, schema=pa.schema(list(self.user_out))) if rows else None
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise UserFunctionError(
                f"{self.label} returned an element that does not fit its output type "
                f"{pa.schema(list(self.user_out))}: {exc}"
            ) from exc
        for field in self.user_out:
            columns.append(
                user.column(field.name).combine_chunks() if user is not None else pa.array([], field.type)
            )
        for name, arrow_type in zip(self.hidden, self.hidden_types, strict=True):
            if self.kind == "column" and name == self.target:
                columns.append(pa.array(computed, arrow_type))
            elif name in names:
                columns.append(batch.column(names.index(name)).take(indices).cast(arrow_type))
            else:
                columns.append(pa.nulls(len(rows), arrow_type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _call(self, element: dict[str, Any], computed: list[Any]) -> list[dict[str, Any]]:
        if self.kind == "map":
            return [as_element(self.function(element), self.label)]
        if self.kind == "filter":
            return [element] if self.function(element) else []
        if self.kind == "flat_map":
            produced = self.function(element)
            return [] if produced is None else [as_element(e, self.label) for e in produced]
        value = self.function(element)
        computed.append(self.target_convert(value) if self.target_convert is not None else value)
        return [element]


def as_element(value: Any, label: str) -> dict[str, Any]:
    """A user function's output as an element dict (dicts and Spark Rows are accepted).

    Raises:
        UserFunctionError: anything else (the message names the operator).
    """
    if isinstance(value, dict):
        return value
    as_dict = getattr(value, "asDict", None)
    if callable(as_dict):
        return dict(as_dict())
    raise UserFunctionError(f"{label} must return dicts (field -> value), got {type(value).__name__}")


def _origin(batch: pa.RecordBatch, row: int) -> str:
    names = batch.schema.names
    if "__part" in names and "__off" in names:
        return f"partition {batch.column(names.index('__part'))[row]} offset {batch.column(names.index('__off'))[row]}"
    return f"row {row} of its batch"
