"""Per-element Python functions over Arrow batches (`mapInArrow` bodies), keeping the hidden columns.

A `PyStage` is a frozen, picklable description built on the driver; Spark ships it to executors and calls it with
each partition's Arrow batches. User functions see elements as dicts of their user fields only; the hidden columns
of an input row (its source position, event time, key) follow each output element produced from it. Partitioning is
unchanged (no shuffle), so a job made only of these stays partition-preserving.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ethereal_kafka.plan.conform import ElementType, FieldType, Mismatch, describe_origin
from ethereal_kafka.plan.errors import OutputTypeError, UserFunctionError, user_error
from ethereal_kafka.plan.user_errors import OperatorErrors

__all__ = ["OutputTypeError", "PyStage", "UserFunctionError", "as_element", "user_then_hidden"]


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
        topics: The source topic(s) the elements come from, for messages (`conform.source_topics`).
        defaulted: `user_out` is the input's type because the operator has no `output_type` (messages say so).
        on_error: What to do when the function raises on an element (`plan.user_errors`; None: fail).
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
    topics: str = ""
    defaulted: bool = False
    on_error: OperatorErrors | None = None
    element_type: ElementType = field(init=False, repr=False, compare=False)
    target_field: FieldType = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built once per stage (on the driver), so a batch checks its elements without per-field dispatch.
        shape = ElementType.of(self.user_out, self.label, "output", self.defaulted)
        object.__setattr__(self, "element_type", shape)
        object.__setattr__(
            self, "target_field", FieldType.of(self.target.strip("_") or "value", self.target_type)
        )

    def output_schema(self) -> pa.Schema:
        """User fields, then hidden columns."""
        return user_then_hidden(self.user_out, self.hidden, self.hidden_types)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Apply the function to every row of every batch (runs in a Spark task).

        Raises:
            UserFunctionError: the function raised (the message names the operator and the record).
            OutputTypeError: an element it made does not fit `user_out` (see `conform`).
        """
        schema = self.output_schema()
        for batch in batches:
            if batch.num_rows == 0:
                continue
            out = self._apply(batch, schema)
            if self.on_error is not None and not self.on_error.fails:
                self.on_error.flush()  # before the batch goes on: its dead letters are left first
            yield out

    def _failed(self, batch: pa.RecordBatch, row: int, element: dict[str, Any], exc: Exception) -> None:
        """The function raised on row `row`: under `on.user.error=skip|dlq` the element is dropped (and
        dead-lettered); else the epoch fails.

        Raises:
            UserFunctionError: the policy is `fail` (one line naming the operator, the user's line and the record).
        """
        where = f"element from {self.origin(batch, row)}"
        if self.on_error is None:
            raise user_error(self.label, exc, where) from exc
        part, offset = self._position(batch, row)
        self.on_error.handle(exc, element, part, offset, where)

    def _position(self, batch: pa.RecordBatch, row: int) -> tuple[Any, Any]:
        names = batch.schema.names
        if "__part" in names and "__off" in names:
            return batch.column(names.index("__part"))[row].as_py(), batch.column(names.index("__off"))[
                row
            ].as_py()
        return None, None

    def _apply(self, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
        elements = pa.Table.from_batches([batch.select(list(self.user_in))]).to_pylist()
        if self.kind in ("filter", "column"):
            return self._keep(batch, elements, schema)
        made: list[dict[str, Any]] = []
        sources: list[int] = []
        start = 0
        while start < len(elements):
            i = start
            # One handler around the loop (not a call per element): this is the per-record path. A failure under
            # skip|dlq resumes after the failed element.
            try:
                for i in range(start, len(elements)):
                    for out in self._call(elements[i]):
                        made.append(out)
                        sources.append(i)
                start = len(elements)
            except UserFunctionError:
                raise
            except Exception as exc:
                self._failed(batch, i, elements[i], exc)
                start = i + 1
        columns = self.element_type.to_arrow(made, lambda index, _: self.origin(batch, sources[index]))
        indices = pa.array(sources, pa.int64())
        return pa.RecordBatch.from_arrays(columns + self._hidden(batch, indices, len(made)), schema=schema)

    def _produce(self, element: dict[str, Any], batch: pa.RecordBatch, row: int) -> bool:
        """`filter`: True to keep the element (False when the predicate raised under skip|dlq)."""
        try:
            return bool(self._call(element))
        except UserFunctionError:
            raise
        except Exception as exc:
            self._failed(batch, row, element, exc)
            return False

    def _keep(
        self, batch: pa.RecordBatch, elements: list[dict[str, Any]], schema: pa.Schema
    ) -> pa.RecordBatch:
        """`filter` and `column`: the input's user columns as they are (no element is made), the rows kept."""
        names = batch.schema.names
        if self.kind == "filter":
            mask = pa.array([self._produce(e, batch, i) for i, e in enumerate(elements)], pa.bool_())
            batch = batch.filter(mask)
            computed: list[Any] = []
        else:
            dropped: list[int] = []
            computed = [self._compute(e, batch, i, dropped) for i, e in enumerate(elements)]
            if dropped:  # the function raised on these rows under skip|dlq: they leave the stream
                gone = set(dropped)
                keep = [i for i in range(batch.num_rows) if i not in gone]
                batch = batch.take(pa.array(keep, pa.int64()))
                computed = [computed[i] for i in keep]
            self._check_target(computed, batch)
        columns = [batch.column(names.index(f.name)).cast(f.type) for f in self.user_out]
        indices = pa.array(range(batch.num_rows), pa.int64())
        return pa.RecordBatch.from_arrays(
            columns + self._hidden(batch, indices, batch.num_rows, computed), schema=schema
        )

    def _compute(self, element: dict[str, Any], batch: pa.RecordBatch, row: int, dropped: list[int]) -> Any:
        try:
            value = self.function(element)
            return self.target_convert(value) if self.target_convert is not None else value
        except UserFunctionError:
            raise
        except Exception as exc:
            self._failed(batch, row, element, exc)
            dropped.append(row)
            return None

    def _check_target(self, computed: list[Any], batch: pa.RecordBatch) -> None:
        """Every computed value (a key, an event time) must fit `target_type` (one pass over the column's types)."""
        target = self.target_field
        if target.exact is None or set(map(type, computed)) <= target.exact:
            return
        for row, value in enumerate(computed):
            try:
                target.check(value, target.name)
            except Mismatch as bad:
                raise OutputTypeError(
                    f"{self.label}: {bad.detail}; element from {self.origin(batch, row)}"
                ) from None

    def _hidden(
        self, batch: pa.RecordBatch, indices: pa.Array, count: int, computed: list[Any] | None = None
    ) -> list[pa.Array]:
        names = batch.schema.names
        columns: list[pa.Array] = []
        for name, arrow_type in zip(self.hidden, self.hidden_types, strict=True):
            if self.kind == "column" and name == self.target:
                columns.append(pa.array(computed or [], arrow_type))
            elif name in names:
                columns.append(batch.column(names.index(name)).take(indices).cast(arrow_type))
            else:
                columns.append(pa.nulls(count, arrow_type))
        return columns

    def _call(self, element: dict[str, Any]) -> list[dict[str, Any]]:
        """The elements the function makes of `element` (`filter`: the element, or none)."""
        if self.kind == "map":
            return [as_element(self.function(element), self.label)]
        if self.kind == "filter":
            return [element] if self.function(element) else []
        produced = self.function(element)
        return [] if produced is None else [as_element(e, self.label) for e in produced]

    def conform(self, element: dict[str, Any], origin: Callable[[], str]) -> dict[str, Any]:
        """`element` (made by `_call`) after checking it against `user_out` (per element: the fan-out path).

        Raises:
            OutputTypeError: it does not fit (the message names `origin()`).
        """
        if self.kind == "filter":
            return element
        try:
            self.element_type.values(element)
        except Mismatch as bad:
            raise self.element_type.error(bad, origin(), element) from None
        return element

    def origin(self, batch: pa.RecordBatch, row: int) -> str:
        """Where row `row` of `batch` came from (topic, partition and offset when the batch carries them)."""
        names = batch.schema.names
        if "__part" in names and "__off" in names:
            part = batch.column(names.index("__part"))[row].as_py()
            offset = batch.column(names.index("__off"))[row].as_py()
            return describe_origin(self.topics, part, offset)
        return f"row {row} of its batch"


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
