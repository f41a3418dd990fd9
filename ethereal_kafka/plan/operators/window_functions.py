"""What a framework window computes: a pane's contents per function kind, and its results when it fires.

Contents per kind (`WindowFunctionSpec.kind`):

- `aggregate`: the `AggregateFunction`'s accumulator (`create_accumulator`/`add`/`merge`); results are
  `get_result` (a dict, or a single value as field `value`), or, with a `window_function`, what that
  `ProcessWindowFunction` yields for the one-element list `[get_result(...)]`.
- `reduce`: the running `ReduceFunction` result (an element).
- `process`: the elements themselves (buffered in state); the `ProcessWindowFunction` gets them in event-time
  order (event time, then source partition and offset, then arrival).
- `exprs`: Spark aggregate expressions the framework evaluates in Python (`ExprAggregate`): `count`, `sum`, `min`,
  `max`, `avg` of a field (or `count(1)`), with Spark's null rules; anything else is refused at compile time.

Sliding count windows keep the elements (`buffer`) whatever the kind, and fold them in arrival order when they
fire, because elements leave the window one by one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.functions import WindowContext
from ethereal_kafka.api.windows import TimeWindow
from ethereal_kafka.plan.errors import user_error
from ethereal_kafka.plan.pyfuncs import UserFunctionError, as_element

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

#: Spark aggregate functions the framework evaluates itself (Catalyst class name -> our name).
EXPR_FUNCTIONS = {"Count": "count", "Sum": "sum", "Min": "min", "Max": "max", "Average": "avg"}


@dataclass(frozen=True)
class ExprAggregate:
    """One Spark aggregate expression evaluated in Python.

    Attributes:
        name: The output field (the expression's alias, or Spark's name for it).
        function: `count`, `sum`, `min`, `max` or `avg`.
        field: The element field it reads; None for `count(1)` / `count(*)`.
    """

    name: str
    function: str
    field: str | None

    def empty(self) -> Any:
        """The accumulator of no elements."""
        return (0, 0) if self.function == "avg" else (0 if self.function == "count" else None)

    def add(self, acc: Any, element: dict[str, Any]) -> Any:
        """Spark's rules: null inputs are skipped; `count(1)` counts every element."""
        value = 1 if self.field is None else element.get(self.field)
        if value is None:
            return acc
        if self.function == "count":
            return acc + 1
        if self.function == "avg":
            return (acc[0] + value, acc[1] + 1)
        if acc is None:
            return value
        if self.function == "sum":
            return acc + value
        return min(acc, value) if self.function == "min" else max(acc, value)

    def merge(self, a: Any, b: Any) -> Any:
        """The accumulator of two merged sessions."""
        if self.function == "count":
            return a + b
        if self.function == "avg":
            return (a[0] + b[0], a[1] + b[1])
        if a is None or b is None:
            return b if a is None else a
        if self.function == "sum":
            return a + b
        return min(a, b) if self.function == "min" else max(a, b)

    def result(self, acc: Any) -> Any:
        """The field's value (`avg` of no elements is null, like Spark)."""
        if self.function == "avg":
            return float(acc[0]) / acc[1] if acc[1] else None
        return acc


@dataclass(frozen=True)
class WindowFunctionSpec:
    """A window node's function, ready to ship to executors (frozen, picklable).

    Attributes:
        label: The operator, for messages.
        kind: `aggregate`, `reduce`, `process` or `exprs` (see the module docstring).
        function: The user's function object (an `AggregateFunction`, a reduce callable, a
            `ProcessWindowFunction`).
        window_function: For `aggregate`: an optional `ProcessWindowFunction` over the single result.
        aggregates: For `exprs`: the expressions.
        buffer: Keep the elements in state (process, sliding count windows).
        key_names: The key's field names (several: user functions get the key as a tuple).
    """

    label: str
    kind: str
    function: Any = None
    window_function: Any = None
    aggregates: tuple[ExprAggregate, ...] = ()
    buffer: bool = False
    key_names: tuple[str, ...] = ()

    # -- contents (the `window_logic.Contents` protocol) -----------------------------------------------------------
    def empty(self) -> Any:
        """Fresh contents of a pane."""
        if self.buffer:
            return []
        if self.kind == "aggregate":
            return self._call("create_accumulator", self.function.create_accumulator)
        if self.kind == "exprs":
            return [a.empty() for a in self.aggregates]
        return None

    def add(self, contents: Any, element: dict[str, Any], order: tuple[int, int, int]) -> Any:
        """`contents` with `element` added."""
        if self.buffer:
            contents.append((order, element))
            return contents
        return self._fold(contents, element)

    def merge(self, a: Any, b: Any) -> Any:
        """Contents of two merged session windows (`a` first)."""
        if self.buffer:
            return a + b
        if self.kind == "aggregate":
            return self._call("merge", self.function.merge, a, b)
        if self.kind == "exprs":
            return [agg.merge(x, y) for agg, x, y in zip(self.aggregates, a, b, strict=True)]
        if a is None or b is None:
            return b if a is None else a
        return as_element(self._call("reduce", self.function, a, b), self.label)

    # -- results ---------------------------------------------------------------------------------------------------
    def results(
        self, key: Any, window: TimeWindow, contents: Any, watermark: int, late: bool
    ) -> list[dict[str, Any]]:
        """The output elements of a firing pane (result fields only; the operator adds key and window)."""
        user_key = self._user_key(key)
        context = WindowContext(window, watermark, late)
        if self.kind == "process":
            elements = [e for _, e in sorted(contents, key=lambda item: tuple(item[0]))]
            return _elements(
                self._call("process", _process(self.function), user_key, context, elements), self.label
            )
        if self.buffer:
            folded = self._fresh()
            for _, element in contents:
                folded = self._fold(folded, element)
            contents = folded
        if self.kind == "exprs":
            return [{a.name: a.result(acc) for a, acc in zip(self.aggregates, contents, strict=True)}]
        if self.kind == "reduce":
            return [] if contents is None else [contents]
        result = self._call("get_result", self.function.get_result, contents)
        if self.window_function is not None:
            produced = self._call(
                "window_function", _process(self.window_function), user_key, context, [result]
            )
            return _elements(produced, self.label)
        return [result if isinstance(result, dict) else {"value": result}]

    def _fresh(self) -> Any:
        if self.kind == "aggregate":
            return self._call("create_accumulator", self.function.create_accumulator)
        if self.kind == "exprs":
            return [a.empty() for a in self.aggregates]
        return None

    def _fold(self, contents: Any, element: dict[str, Any]) -> Any:
        if self.kind == "aggregate":
            return self._call("add", self.function.add, element, contents)
        if self.kind == "exprs":
            return [agg.add(acc, element) for agg, acc in zip(self.aggregates, contents, strict=True)]
        if contents is None:
            return dict(element)
        return as_element(self._call("reduce", self.function, contents, element), self.label)

    def _user_key(self, key: Any) -> Any:
        if len(self.key_names) > 1 and isinstance(key, dict):
            return tuple(key.get(n) for n in self.key_names)
        return key

    def _call(self, what: str, function: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except UserFunctionError:
            raise
        except Exception as exc:
            raise user_error(self.label, exc, f"in {what}") from exc


def _process(function: Any) -> Any:
    """A ProcessWindowFunction's `process` method, or the function itself when it is a plain callable."""
    method = getattr(function, "process", None)
    return method if callable(method) else function


def _elements(values: Iterable[Any] | None, label: str) -> list[dict[str, Any]]:
    return [] if values is None else [as_element(v, label) for v in values]


def translate_aggregates(
    frame: DataFrame, key: str, columns: tuple[Any, ...], fields: tuple[str, ...], where: str
) -> tuple[tuple[ExprAggregate, ...], StructType]:
    """Turn Spark aggregate columns into `ExprAggregate`s, with the result fields Spark itself would give them.

    Spark analyses `frame.groupBy(key).agg(*columns)` (nothing runs); each output must be a plain `count`, `sum`,
    `min`, `max` or `avg` of a field (or `count(1)`), without DISTINCT or FILTER.

    Raises:
        GraphError: an expression that is not one of those (the message names it), or one Spark rejects.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    try:
        grouped = frame.groupBy(F.col(key)).agg(*[F.expr(c) if isinstance(c, str) else c for c in columns])
        schema = grouped.schema
        analyzed = grouped._jdf.queryExecution().analyzed()
    except Exception as exc:
        raise GraphError(f"{where}: {exc}") from exc
    expressions = analyzed.aggregateExpressions()
    aggregates = []
    for i in range(1, expressions.size()):
        aggregates.append(_translate(expressions.apply(i), schema.fields[i].name, fields, where))
    return tuple(aggregates), StructType(schema.fields[1:])


def _translate(expr: Any, name: str, fields: tuple[str, ...], where: str) -> ExprAggregate:
    text = str(expr.sql())
    hint = (
        f"{where}: aggregate {text!r} cannot run on the framework's window operator (needed here for lateness, "
        "a late-data side output, a trigger, count/global windows or a session max length): it evaluates count, "
        "sum, min, max and avg of a field; compute other expressions with a Python AggregateFunction, or prepare "
        "the field with with_columns(...) first"
    )
    inner = expr.child() if expr.getClass().getSimpleName() == "Alias" else expr
    if inner.getClass().getSimpleName() != "AggregateExpression":
        raise GraphError(hint)
    function = inner.aggregateFunction()
    kind = EXPR_FUNCTIONS.get(str(function.getClass().getSimpleName()))
    if kind is None or inner.isDistinct() or inner.filter().isDefined():
        raise GraphError(hint)
    children = function.children()
    if children.size() != 1:
        raise GraphError(hint)
    child = children.apply(0)
    child_kind = str(child.getClass().getSimpleName())
    if kind == "count" and child_kind == "Literal" and child.value() is not None:
        return ExprAggregate(name, kind, None)
    if child_kind != "AttributeReference" or str(child.name()) not in fields:
        raise GraphError(hint)
    if kind == "avg" and str(child.dataType().typeName()).startswith("decimal"):
        raise GraphError(hint)
    return ExprAggregate(name, kind, str(child.name()))
