"""Rolling aggregates of a keyed stream (Flink's `KeyedStream.reduce/aggregate/sum/min/max`): one output element per
input element, carrying the key's aggregate so far.

State: one pickled accumulator per key (a Spark ValueState). Elements of a key are folded in `element_order` (event
time, source partition, offset, content) within an epoch, and epochs in order; nothing is late and nothing waits
for the watermark (the operator runs in Spark's time mode None), so the output of an element is final when emitted.

Output elements:

- `reduce(f)`: the reduced element — the key's first element as is, then `f(previous result, element)`;
- `sum/min/max(field)`: the same with `f` = keep the running result and set `field` to the sum / minimum /
  maximum so far (Flink's semantics: the other fields are those of the key's first element); nulls are skipped;
- `aggregate(agg)`: the key field(s) (`key` for a selector key), then the fields of
  `agg.get_result(accumulator)` (a dict, or one value in field `value`).

Each output keeps the input element's event time (`__ts`) and key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.plan.conform import Mismatch, describe_origin
from ethereal_kafka.plan.errors import user_error
from ethereal_kafka.plan.operators.base import PICKLED, OutputLayout, sorted_rows, user_element
from ethereal_kafka.plan.operators.keyed_state import dumps, loads
from ethereal_kafka.plan.pyfuncs import as_element
from ethereal_kafka.plan.schema import KEY, OFFSET, PART, TS

KINDS = ("reduce", "aggregate", "sum", "min", "max")


@dataclass(frozen=True)
class RollingSpec:
    """What a rolling aggregate runs (built on the driver, pickled to executors).

    Attributes:
        label: The operator's name for messages.
        kind: One of `KINDS`.
        function: The ReduceFunction's method / callable (`reduce`) or the AggregateFunction (`aggregate`).
        field_name: The aggregated field (`sum`/`min`/`max`).
        key_names: `aggregate`: the output fields holding the key (its fields, or `key`).
        layout: The output rows' user fields, with the type their elements must have.
        columns: Every output column, in order (user fields, `__ts`, `__key`).
        topics: The source topic(s) of the elements, for messages.
    """

    label: str
    kind: str
    function: Any
    field_name: str | None
    key_names: tuple[str, ...]
    layout: OutputLayout
    columns: tuple[str, ...]
    topics: str = ""


def fold(spec: RollingSpec, accumulator: Any, element: dict[str, Any]) -> Any:
    """The accumulator after `element` (None: the key has no accumulator yet)."""
    kind = spec.kind
    if kind == "aggregate":
        function = spec.function
        start = function.create_accumulator() if accumulator is None else accumulator
        return function.add(element, start)
    if accumulator is None:
        return dict(element)
    if kind == "reduce":
        return as_element(spec.function(accumulator, element), spec.label)
    name = spec.field_name
    assert name is not None
    old, new = accumulator.get(name), element.get(name)
    if old is None or new is None:
        value = new if old is None else old
    elif kind == "sum":
        value = old + new
    elif kind == "min":
        value = min(old, new)
    else:
        value = max(old, new)
    return {**accumulator, name: value}


def result(spec: RollingSpec, accumulator: Any, key: Any) -> dict[str, Any]:
    """The output element for `accumulator` (`key`: the `__key` value)."""
    if spec.kind != "aggregate":
        return dict(accumulator)
    produced = spec.function.get_result(accumulator)
    fields = produced if isinstance(produced, dict) else {"value": produced}
    return {**key_fields(spec.key_names, key), **fields}


def key_fields(names: tuple[str, ...], key: Any) -> dict[str, Any]:
    """The key as output fields: a struct key's fields by name, or a single key under its one name."""
    if hasattr(key, "asDict"):
        key = key.asDict(recursive=True)
    if isinstance(key, dict) and len(names) > 1:
        return {n: key.get(n) for n in names}
    return {names[0]: key} if names else {}


class RollingProcessor(StatefulProcessor):
    """Runs a `RollingSpec` per key (Spark calls `init` per task, `handleInputRows` per key and epoch)."""

    def __init__(self, spec: RollingSpec) -> None:
        self._spec = spec

    def init(self, handle: Any) -> None:
        from pyspark.sql import Row

        self._state = handle.getValueState("_ek_acc", PICKLED)
        self._row = Row(*self._spec.columns)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        spec = self._spec
        raw = self._state.get()
        accumulator = loads(raw[0]) if raw is not None else None
        out = []
        for row in sorted_rows(rows):
            try:
                accumulator = fold(spec, accumulator, user_element(row))
                element = result(spec, accumulator, row.get(KEY))
            except EtherealKafkaError:
                raise
            except Exception as exc:
                where = f"element from {describe_origin(spec.topics, row.get(PART), row.get(OFFSET))}"
                raise user_error(spec.label, exc, where) from exc
            try:
                values = spec.layout.main(element, row.get(TS), row.get(KEY))
            except Mismatch as bad:
                origin = describe_origin(spec.topics, row.get(PART), row.get(OFFSET))
                raise spec.layout.type_of(None).error(bad, origin, element, spec.label) from None
            out.append(self._row(*values))
        if out:
            self._state.update((dumps(accumulator),))
        return iter(out)

    def close(self) -> None:
        pass
