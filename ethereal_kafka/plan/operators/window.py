"""The framework's window operator: every keyed window Spark cannot run natively (see `plan.windows`).

`compile_framework_window` plans it on the driver (a frozen `WindowPlan`: the normalized window, the function,
the output columns) and runs `WindowProcessor` per key on Spark's Row-based transformWithState, in EventTime mode
over input that kept its late rows (`base.strip_watermark`). The per-key logic is `window_logic.KeyWindows`; what
a pane holds and how it becomes output is `window_functions.WindowFunctionSpec`.

State per key: a map from window `(start, end)` to its `Pane` (pickled; only panes an epoch touched are written
back). Timers: one per pending event time of the key (window ends, continuous-trigger points, cleanup at
`end + allowed_lateness`); they only wake the key up, and `KeyWindows.advance` decides, idempotently, what fires.

Output rows (in this order): `window_start`, `window_end` (time windows), the result fields, `__ts` (time windows:
end - 1 ms; count/global windows: the largest event time in the pane), `__key`, and with a late-data side output
`__tag` plus the struct column of the late elements (the input's user fields, `__ts` their own event time). The
compiled stream then puts the key fields first (`plan.stream.key_columns`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.windows import TimeWindow
from ethereal_kafka.plan.conform import ElementType, Mismatch
from ethereal_kafka.plan.operators.base import (
    PickledMap,
    millis,
    sorted_rows,
    timestamp,
    transform,
)
from ethereal_kafka.plan.operators.window_functions import WindowFunctionSpec, translate_aggregates
from ethereal_kafka.plan.operators.window_logic import KeyWindows, Pane, WindowSpec
from ethereal_kafka.plan.schema import (
    KEY,
    OFFSET,
    PART,
    SEQ,
    TAG,
    TS,
    arrow_of,
    arrow_struct,
    side_column,
    spark_struct,
)
from ethereal_kafka.plan.stream import Stream, key_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.stateful_processor import (
        ExpiredTimerInfo,
        StatefulProcessorHandle,
        TimerValues,
    )
    from pyspark.sql.types import StructType

    from ethereal_kafka.plan.context import CompileContext

#: Window bound fields of time windows.
WINDOW_FIELDS = ("window_start", "window_end")

_NO_TIME = -(2**62)


@dataclass(frozen=True)
class WindowPlan:
    """Everything the executors need to run one window operator (frozen, picklable).

    Attributes:
        window: The normalized window settings.
        function: The window function.
        fields: The input's user fields (what functions and late records see).
        results: The result fields written per output element.
        columns: The operator's output columns, in order.
        late_tag: The late-data side output's name, or None.
        event_time: The input has `__ts` and a watermark (EventTime mode, timers).
        result_type: What each result element must be (`plan.conform`); default: the `results` names, any
            values, the key fields allowed (they are taken from the key).
    """

    window: WindowSpec
    function: WindowFunctionSpec
    fields: tuple[str, ...]
    results: tuple[str, ...]
    columns: tuple[str, ...]
    late_tag: str | None
    event_time: bool
    result_type: ElementType | None = None

    def __post_init__(self) -> None:
        if self.result_type is None:
            shape = ElementType.names_only(self.results, self.function.label, "result")
            object.__setattr__(
                self, "result_type", replace(shape, ignored=frozenset(self.function.key_names))
            )


def compile_framework_window(ctx: CompileContext, node: g.WindowNode, stream: Stream) -> Stream:
    """Compile `node` onto the framework's window operator (called by `plan.windows.compile_window`).

    Raises:
        GraphError: an unsupported combination, a Python function without the `output_type` its result needs, or
            a Spark aggregate the framework cannot evaluate (the message names the operator and the fix).
    """
    assert node.assigner is not None and node.function is not None
    window = WindowSpec.build(
        node.assigner, node.trigger, node.allowed_lateness.millis, node.late_tag is not None, node.label
    )
    if window.needs_event_time and not stream.watermarked:
        raise GraphError(
            f"{node.label}: this window fires on event time: call assign_timestamps_and_watermarks before key_by"
        )
    plan, schema = _plan(node, stream, window)
    return Stream.of(
        _run(stream, plan, schema, ctx.initial_state(node), node.label),
        key_fields=stream.key_fields,
        watermarked=False,
        tags=(node.late_tag,) if node.late_tag is not None else (),
        stateful=True,
    )


def _plan(node: g.WindowNode, stream: Stream, window: WindowSpec) -> tuple[WindowPlan, StructType]:
    """The executor-side plan and the operator's output schema."""
    from pyspark.sql.types import StructType

    function, result_schema = _function(node, stream, window)
    key_names = stream.key_fields or ("key",)
    result_fields = [f for f in result_schema.fields if f.name not in key_names]
    if window.timed and any(f.name in WINDOW_FIELDS for f in result_fields):
        raise GraphError(f"{node.label}: result fields may not be named window_start or window_end")
    late = node.late_tag.name if node.late_tag is not None else None
    schema = _output_schema(stream, window, result_fields, late)
    event_time = stream.watermarked and TS in stream.frame.columns
    results = tuple(f.name for f in result_fields)
    arrow = arrow_of(StructType(result_fields))
    defaulted = node.function is not None and node.function.kind == "reduce" and not node.function.output_type
    result_type = ElementType.of(arrow, node.label, "result", defaulted, ignored=key_names)
    plan = WindowPlan(
        window, function, stream.fields, results, tuple(schema.names), late, event_time, result_type
    )
    return plan, schema


def _run(
    stream: Stream, plan: WindowPlan, schema: StructType, initial: DataFrame | None = None, label: str = ""
) -> DataFrame:
    """The operator over `stream`, its output with the key fields first (see the module docstring); `initial`: its
    state restored from a savepoint."""
    from pyspark.sql import functions as F

    keep = [*stream.fields, *[c for c in (TS, PART, OFFSET, KEY) if c in stream.frame.columns]]
    mode = "EventTime" if plan.window.needs_event_time else "None"
    frame = transform(
        stream.frame.select(*[F.col(f"`{c}`") for c in keep]),
        WindowProcessor(plan),
        schema,
        mode,
        initial,
        label,
    )
    tail = [c for c in (TS, KEY, TAG) if c in schema.names and (c != TS or plan.event_time)] + [SEQ]
    if plan.late_tag is not None:
        tail.append(side_column(plan.late_tag))
    bounds = list(WINDOW_FIELDS) if plan.window.timed else []
    return frame.select(
        *key_columns(stream), *[F.col(f"`{c}`") for c in [*bounds, *plan.results]], *[F.col(c) for c in tail]
    )


def _function(
    node: g.WindowNode, stream: Stream, window: WindowSpec
) -> tuple[WindowFunctionSpec, StructType]:
    """The function spec and its result fields (Spark types)."""
    assert node.function is not None
    wf = node.function
    buffer = wf.kind == "process" or window.evict is not None
    keys = stream.key_fields or ()
    if wf.kind == "agg":
        aggregates, schema = translate_aggregates(stream.frame, KEY, wf.columns, stream.fields, node.label)
        return WindowFunctionSpec(
            node.label, "exprs", aggregates=aggregates, buffer=buffer, key_names=keys
        ), schema
    if wf.kind == "reduce" and wf.output_type is None:
        from pyspark.sql.types import StructType

        schema = StructType([stream.frame.schema[f] for f in stream.fields])
    elif wf.output_type is None:
        raise GraphError(
            f"{node.label}: {wf.kind}(...) on a window needs output_type, the Spark DDL of its result fields "
            "(e.g. output_type='total long, n long'; a result that is not a dict becomes the field `value`)"
        )
    else:
        schema = spark_struct(arrow_struct(wf.output_type, node.label))
    if wf.kind == "aggregate":
        for method in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(wf.function, method, None)):
                raise GraphError(f"{node.label}: aggregate(...) takes an AggregateFunction (no {method}())")
    spec = WindowFunctionSpec(
        node.label, wf.kind, wf.function, wf.window_function, buffer=buffer, key_names=keys
    )
    return spec, schema


def _output_schema(stream: Stream, window: WindowSpec, results: list[Any], late: str | None) -> StructType:
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    fields = [StructField(n, TimestampType()) for n in WINDOW_FIELDS] if window.timed else []
    fields += [StructField(f.name, f.dataType) for f in results]
    fields += [StructField(TS, TimestampType()), StructField(KEY, stream.frame.schema[KEY].dataType)]
    if late is not None:
        element = StructType([stream.frame.schema[f] for f in stream.fields])
        fields += [StructField(TAG, StringType()), StructField(side_column(late), element)]
    return StructType(fields)


class WindowProcessor(StatefulProcessor):
    """Runs one window operator per key (see the module docstring). Spark calls `handleInputRows` for each key
    with rows in an epoch, then `handleExpiredTimer` for each expired timer; both start by applying the epoch's
    watermark, so what fires does not depend on which of them runs first."""

    def __init__(self, plan: WindowPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state (called by Spark on each executor before any key)."""
        from pyspark.sql import Row

        self.handle = handle
        self.panes = PickledMap(handle, "panes")
        self.row = Row(*self.plan.columns)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[Any]:
        """Apply the watermark, then add the key's rows of this epoch in element order."""
        watermark = timerValues.getCurrentWatermarkInMs()
        out: list[Any] = []
        windows = self._load(key[0], watermark, out)
        stored = frozenset(windows.panes)
        windows.advance(watermark)
        for row in sorted_rows(rows):
            part, offset = row.get(PART), row.get(OFFSET)
            order = (
                millis(row.get(TS)) if self.plan.event_time else _NO_TIME,
                -1 if part is None else int(part),
                -1 if offset is None else int(offset),
            )
            element = {f: row.get(f) for f in self.plan.fields}
            if not windows.add(element, order, watermark) and self.plan.late_tag is not None:
                out.append(self._late_row(key[0], element, row.get(TS)))
        self._store(windows, watermark, stored)
        return iter(out)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Any]:
        """Apply the watermark for a key without rows in this epoch (idempotent after `handleInputRows`)."""
        watermark = timerValues.getCurrentWatermarkInMs()
        out: list[Any] = []
        windows = self._load(key[0], watermark, out)
        stored = frozenset(windows.panes)
        windows.advance(watermark)
        self._store(windows, watermark, stored)
        return iter(out)

    def close(self) -> None:
        """Nothing to release."""

    def _load(self, key: Any, watermark: int, out: list[Any]) -> KeyWindows:
        def fire(pane: Pane, late: bool) -> None:
            window = TimeWindow(pane.start, pane.end)
            for result in self.plan.function.results(key, window, pane.contents, watermark, late):
                out.append(self._main_row(key, pane, result))

        return KeyWindows(self.plan.window, self.plan.function, fire, dict(self.panes.items()))

    def _store(self, windows: KeyWindows, watermark: int, stored: frozenset[tuple[int, int]]) -> None:
        """Write the key's changed and removed panes back (`stored`: the panes its state held), and make its timers
        those its panes want. A key whose state held no pane has no timer after the watermark (every call leaves
        exactly its panes' timers), so its timers are not listed: each state call is a round trip to the JVM."""
        for window in sorted(windows.removed):
            if window in stored:  # a pane made and dropped in this call was never written
                self.panes.remove_stored(window)
        for window in sorted(windows.changed):
            self.panes.put(window, windows.panes[window])
        if not self.plan.event_time or not self.plan.window.needs_event_time:
            return
        wanted = windows.timers(watermark)
        existing = {at for at in self.handle.listTimers() if at > watermark} if stored else set()
        for at in sorted(wanted - existing):
            self.handle.registerTimer(at)
        for at in sorted(existing - wanted):
            self.handle.deleteTimer(at)

    def _main_row(self, key: Any, pane: Pane, result: dict[str, Any]) -> Any:
        shape = self.plan.result_type
        assert shape is not None
        try:
            fields = shape.values(result)
        except Mismatch as bad:
            where = f"the window [{pane.start}, {pane.end}) of key {key!r}"
            raise shape.error(bad, where, result) from None
        values: list[Any] = []
        if self.plan.window.timed:
            values += [timestamp(pane.start), timestamp(pane.end)]
            ts = timestamp(pane.end - 1)
        else:
            ts = timestamp(pane.last) if self.plan.event_time and pane.last > _NO_TIME else None
        values += fields
        values += [ts, key]
        if self.plan.late_tag is not None:
            values += [None, None]
        return self.row(*values)

    def _late_row(self, key: Any, element: dict[str, Any], ts: Any) -> Any:
        values = [None] * (len(self.plan.columns) - 4) + [ts, key, self.plan.late_tag, element]
        return self.row(*values)
