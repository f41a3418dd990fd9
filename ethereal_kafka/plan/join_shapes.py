"""The shapes every join shares, whichever engine runs it: the sides' keys and elements going in, and the join's
output coming out (the function's elements, or the default merge; see `plan.joins` for the semantics).

`plan.joins` (Spark-native joins) and `plan.operators.join` (the framework's join operator) both build on this
module; it imports neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.plan.conform import ElementType
from ethereal_kafka.plan.errors import user_error
from ethereal_kafka.plan.pyfuncs import UserFunctionError, user_then_hidden
from ethereal_kafka.plan.schema import KEY, TS, arrow_of, arrow_struct, spark_struct
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Columns of a joined frame before the output is shaped: the sides' elements as structs.
LEFT, RIGHT = "__l", "__r"
WINDOW_FIELDS = ("window_start", "window_end")
_WATERMARK_KEY = "spark.watermarkDelayMs"


# -- keys -------------------------------------------------------------------------------------------------------
def side_key(node: g.JoinNode, stream: Stream, side: str, names: tuple[str, ...]) -> Column:
    """The join key of one input as one column: its key field (several: a struct named after the left's fields),
    or its `key_by` key when the join names no fields.

    Raises:
        GraphError: a named key field is missing, or the input is not keyed and no fields are named.
    """
    from pyspark.sql import functions as F

    fields = node.left_key if side == "left" else node.right_key
    if not fields:
        if not stream.keyed:
            raise GraphError(f"{node.label}: the {side} input is not keyed: call key_by on it")
        return F.col(KEY)
    missing = [f for f in fields if f not in stream.fields]
    if missing:
        raise GraphError(
            f"{node.label}: the {side} input has no field(s) {', '.join(missing)} "
            f"(fields: {', '.join(stream.fields)})"
        )
    if len(fields) == 1:
        return F.col(f"`{fields[0]}`")
    return F.struct(*[F.col(f"`{f}`").alias(n) for f, n in zip(fields, names, strict=True)])


def key_pair(node: g.JoinNode, left: Stream, right: Stream) -> tuple[Column, Column]:
    """Both sides' key columns, the right one cast to the left one's type (so they compare and union)."""
    names = node.left_key or ("key",)
    lkey = side_key(node, left, "left", names)
    rkey = side_key(node, right, "right", names)
    ltype = left.frame.select(lkey).schema.fields[0].dataType
    rtype = right.frame.select(rkey).schema.fields[0].dataType
    if ltype != rtype:
        try:
            right.frame.select(rkey.cast(ltype)).schema  # noqa: B018 - analyse the cast now
        except Exception as exc:
            raise GraphError(
                f"{node.label}: the key types differ ({ltype.simpleString()} vs {rtype.simpleString()})"
            ) from exc
        rkey = rkey.cast(ltype)
    return lkey, rkey


def element(stream: Stream) -> Column:
    """One input's user fields as one struct column."""
    from pyspark.sql import functions as F

    return F.struct(*[F.col(f"`{f}`") for f in stream.fields])


# -- output -----------------------------------------------------------------------------------------------------
def finish(node: g.JoinNode, frame: DataFrame, left: Stream, right: Stream) -> Stream:
    """Shape a joined frame (`__l`, `__r` (not for semi/anti), window bounds for windowed joins, `__ts`, `__key`)
    into the join's output: the function's elements, or the default merge (see the module docstring)."""
    from pyspark.sql import functions as F

    windowed = "window_start" in frame.columns
    if node.function is not None:
        stage = JoinFunctionStage.build(node, frame)
        out = frame.mapInArrow(stage, spark_struct(stage.output_schema()))
    else:
        columns = [F.col(f"{LEFT}.`{f}`").alias(f) for f in left.fields]
        if RIGHT in frame.columns:
            names = merged_right_names(node, left.fields, right.fields)
            columns += [F.col(f"{RIGHT}.`{f}`").alias(n) for f, n in zip(right.fields, names, strict=True)]
        taken = [
            c for c in WINDOW_FIELDS if windowed and c in {*left.fields, *merged_names(node, left, right)}
        ]
        if taken:
            raise GraphError(
                f"{node.label}: the default output adds {', '.join(WINDOW_FIELDS)}, which the inputs have; "
                "pass a function to apply(...)"
            )
        bounds = [F.col(c) for c in WINDOW_FIELDS] if windowed else []
        out = frame.select(*columns, *bounds, F.col(TS), F.col(KEY))
    watermarked = bool(out.schema[TS].metadata.get(_WATERMARK_KEY) is not None)
    return Stream.of(out, key_fields=None, watermarked=watermarked, stateful=True)


def merged_names(node: g.JoinNode, left: Stream, right: Stream) -> list[str]:
    """The default output's right field names (empty for semi/anti)."""
    if node.how in ("semi", "anti"):
        return []
    return merged_right_names(node, left.fields, right.fields)


def merged_right_names(node: g.JoinNode, left: tuple[str, ...], right: tuple[str, ...]) -> list[str]:
    """Right field names in the default output: `right_<f>` where the left has `f`.

    Raises:
        GraphError: a prefixed name is taken too.
    """
    names = [f"right_{f}" if f in left else f for f in right]
    clash = sorted({n for n in names if n in left} | {n for n in names if names.count(n) > 1})
    if clash:
        raise GraphError(
            f"{node.label}: the default output would have field(s) {', '.join(clash)} twice; pass a function"
        )
    return names


@dataclass(frozen=True)
class JoinFunctionStage:
    """Calls a join's `function(left, right)` per joined row (frozen, picklable; a `mapInArrow` body).

    Attributes:
        label: The operator's name for messages.
        function: The user's function.
        user_out: The output elements' fields (Arrow struct); each element must have exactly these (`conform`).
        hidden: The hidden columns carried from each joined row (`__ts`, `__key`), with their Arrow types.
    """

    label: str
    function: Callable[[dict[str, Any] | None, dict[str, Any] | None], Any]
    user_out: pa.StructType
    hidden: tuple[str, ...]
    hidden_types: tuple[pa.DataType, ...]
    element_type: ElementType = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "element_type", ElementType.of(self.user_out, self.label, "output"))

    @classmethod
    def build(cls, node: g.JoinNode, frame: DataFrame) -> JoinFunctionStage:
        """Plan the stage (driver side)."""
        assert node.output_type is not None
        arrow = arrow_of(frame.schema)
        hidden = (TS, KEY)
        return cls(
            node.label,
            node.function,
            arrow_struct(node.output_type, node.label),
            hidden,
            tuple(arrow.field(h).type for h in hidden),
        )

    def output_schema(self) -> pa.Schema:
        """The function's fields, then the hidden columns."""
        return user_then_hidden(self.user_out, self.hidden, self.hidden_types)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Apply the function to every joined row (runs in a Spark task).

        Raises:
            UserFunctionError: the function raised or returned something other than a dict.
            OutputTypeError: an element does not fit `user_out` (the message names the pair's key).
        """
        schema = self.output_schema()
        shape = self.element_type
        for batch in batches:
            if batch.num_rows == 0:
                continue
            names = batch.schema.names
            n = batch.num_rows
            lefts = batch.column(names.index(LEFT)).to_pylist() if LEFT in names else [None] * n
            rights = batch.column(names.index(RIGHT)).to_pylist() if RIGHT in names else [None] * n
            keys = batch.column(names.index(KEY)) if KEY in names else None

            def where(row: int, keys: Any = keys) -> str:
                key = keys[row].as_py() if keys is not None else None
                return f"the joined pair {row} of its batch, key {key!r}"

            elements = [self._call(a, b) for a, b in zip(lefts, rights, strict=True)]
            columns = shape.to_arrow(elements, lambda row, _: where(row))
            columns += [
                batch.column(names.index(h)).cast(t)
                for h, t in zip(self.hidden, self.hidden_types, strict=True)
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    def _call(self, left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
        try:
            value = self.function(left, right)
        except Exception as exc:
            raise user_error(self.label, exc, f"the join function, on ({left!r}, {right!r})") from exc
        if isinstance(value, dict):
            return value
        as_dict = getattr(value, "asDict", None)
        if callable(as_dict):
            return dict(as_dict())
        raise UserFunctionError(
            f"{self.label}: the join function must return dicts, got {type(value).__name__}"
        )
