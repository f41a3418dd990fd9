"""The framework's windowed join operator: the joins Spark cannot run natively (see `plan.joins`): anti joins, and
every join kind over session windows.

Both inputs are unioned — each element as a struct in `__l` or `__r`, keyed by the join key — and one
`JoinProcessor` per key runs on Spark's Row-based transformWithState in EventTime mode, over input that kept its late
rows (`base.strip_watermark`). Windows follow the framework's window logic (`window_logic.KeyWindows`, "watermark
first", no allowed lateness): at the start of an epoch with watermark `W` every window ending at or before `W`
closes; then the epoch's elements are added in element order, an element whose windows all end at or before `W`
being late (dropped); sessions merge across both sides. When a window closes, its join is computed from the
elements it holds and emitted at once:

- inner: every (left, right) pair; left / right / full: the pairs, plus each element of a side that had no partner
  in the window, null-padded (right elements when the window has no left element, and vice versa);
- semi: each left element of a window with at least one right element; anti: each left element of a window with
  none.

Rows come out in a fixed order (pairs in the order of their left, then right element; elements by event time,
source partition, offset, side, content), so a replayed epoch emits the same rows. State per key: the open windows
(`(start, end)` -> `Pane` with the elements; semi/anti keep only a count of right elements).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.windows import EventTimeTrigger, TimeWindow
from ethereal_kafka.plan.join_shapes import element, finish, key_pair
from ethereal_kafka.plan.operators.base import PickledMap, Restoring, millis, strip_watermark, timestamp
from ethereal_kafka.plan.operators.window_logic import KeyWindows, Pane, WindowSpec
from ethereal_kafka.plan.schema import KEY, OFFSET, PART, TS
from ethereal_kafka.plan.stream import Stream

if TYPE_CHECKING:
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import (
        ExpiredTimerInfo,
        StatefulProcessorHandle,
        TimerValues,
    )
    from pyspark.sql.types import StructType

    from ethereal_kafka.plan.context import CompileContext

#: The processor's output columns (then shaped by `plan.join_shapes.finish`).
COLUMNS = ("__l", "__r", "window_start", "window_end", TS, KEY)

_SIDE = "__side"


@dataclass(frozen=True)
class JoinPlan:
    """What the executors need to run one framework join (frozen, picklable).

    Attributes:
        how: The join kind.
        window: The normalized window (event-time trigger, no lateness).
        left_fields, right_fields: Each side's user fields (struct field order).
    """

    how: str
    window: WindowSpec
    left_fields: tuple[str, ...]
    right_fields: tuple[str, ...]

    @property
    def keeps_right(self) -> bool:
        """Right elements are kept (not only counted): every kind but semi and anti."""
        return self.how not in ("semi", "anti")


def compile_framework_join(ctx: CompileContext, node: g.JoinNode, left: Stream, right: Stream) -> Stream:
    """Compile a windowed `node` onto the framework's join operator (called by `plan.joins.compile_join`).

    Raises:
        GraphError: a session window with a max length, or the key/field problems `plan.joins` reports.
    """
    from pyspark.sql import functions as F

    assert node.window is not None
    if getattr(node.window, "max_length", None) is not None:
        raise GraphError(f"{node.label}: session windows with a max length are not supported in joins")
    window = WindowSpec.build(node.window, EventTimeTrigger(), 0, False, node.label)
    plan = JoinPlan(node.how, window, left.fields, right.fields)
    lkey, rkey = key_pair(node, left, right)
    lstruct, rstruct = element(left), element(right)
    ltype = left.frame.select(lstruct).schema.fields[0].dataType
    rtype = right.frame.select(rstruct).schema.fields[0].dataType

    def side(stream: Stream, index: int, key: Any) -> Any:
        own = lstruct if index == 0 else rstruct
        null_left = F.lit(None).cast(ltype)
        null_right = F.lit(None).cast(rtype)
        return stream.frame.select(
            F.lit(index).alias(_SIDE),
            (own if index == 0 else null_left).alias("__l"),
            (own if index == 1 else null_right).alias("__r"),
            F.col(TS),
            _optional(stream, PART, "int"),
            _optional(stream, OFFSET, "long"),
            key.alias(KEY),
        )

    union = side(left, 0, lkey).unionByName(side(right, 1, rkey))
    schema = _output_schema(ltype, rtype, union.schema[KEY].dataType)
    grouped = strip_watermark(union).groupBy(F.col(KEY))
    initial = ctx.initial_state(node)
    if initial is None:
        frame = grouped.transformWithState(JoinProcessor(plan), schema, "append", "EventTime")
    else:  # its state restored from a savepoint (`plan.operators.base.Restoring`)
        frame = grouped.transformWithState(
            Restoring(JoinProcessor(plan), node.label),
            schema,
            "append",
            "EventTime",
            initialState=initial.groupBy(F.col(KEY)),
        )
    if node.how in ("semi", "anti"):
        frame = frame.drop("__r")
    return finish(node, frame, left, right)


def _optional(stream: Stream, name: str, kind: str) -> Any:
    from pyspark.sql import functions as F

    return (F.col(name) if name in stream.frame.columns else F.lit(None).cast(kind)).alias(name)


def _output_schema(ltype: Any, rtype: Any, key_type: Any) -> StructType:
    from pyspark.sql.types import StructField, StructType, TimestampType

    return StructType(
        [
            StructField("__l", ltype),
            StructField("__r", rtype),
            StructField("window_start", TimestampType()),
            StructField("window_end", TimestampType()),
            StructField(TS, TimestampType()),
            StructField(KEY, key_type),
        ]
    )


class JoinContents:
    """A pane's elements: `{"l": [(sort key, element)], "r": [...] or a count}` (see `window_logic.Contents`)."""

    def __init__(self, keeps_right: bool) -> None:
        self.keeps_right = keeps_right

    def empty(self) -> dict[str, Any]:
        """No elements."""
        return {"l": [], "r": [] if self.keeps_right else 0}

    def add(
        self, contents: dict[str, Any], item: dict[str, Any], order: tuple[int, int, int]
    ) -> dict[str, Any]:
        """Add one side's element (`item = {"side": 0|1, "element": {...}}`)."""
        element = item["element"]
        sort_key = (*order, item["side"], json.dumps(element, sort_keys=True, default=repr))
        if item["side"] == 0:
            contents["l"].append((sort_key, element))
        elif self.keeps_right:
            contents["r"].append((sort_key, element))
        else:
            contents["r"] += 1
        return contents

    def merge(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        """Two merged sessions' elements."""
        right = a["r"] + b["r"]
        return {"l": a["l"] + b["l"], "r": right}


def join_window(how: str, lefts: list[Any], rights: list[Any] | int) -> list[tuple[Any, Any]]:
    """The `(left, right)` outputs of one closed window (None for a missing side; see the module docstring)."""
    ls = [e for _, e in sorted(lefts, key=lambda item: item[0])]
    if isinstance(rights, int):
        if how == "semi":
            return [(e, None) for e in ls] if rights else []
        return [] if rights else [(e, None) for e in ls]
    rs = [e for _, e in sorted(rights, key=lambda item: item[0])]
    pairs = [(a, b) for a in ls for b in rs]
    if how in ("left", "full") and not rs:
        pairs += [(a, None) for a in ls]
    if how in ("right", "full") and not ls:
        pairs += [(None, b) for b in rs]
    return pairs


class JoinProcessor(StatefulProcessor):
    """Runs one framework join per key (see the module docstring). Spark calls `handleInputRows` for each key with
    rows in an epoch, then `handleExpiredTimer` per expired timer; both first apply the epoch's watermark, so what
    closes does not depend on which runs first."""

    def __init__(self, plan: JoinPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state (called by Spark on each executor before any key)."""
        from pyspark.sql import Row

        self.handle = handle
        self.panes = PickledMap(handle, "panes")
        self.row = Row(*COLUMNS)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        """Close the windows the watermark passed, then add the key's rows of this epoch in element order."""
        watermark = timerValues.getCurrentWatermarkInMs()
        out: list[Row] = []
        windows = self._load(key[0], out)
        windows.advance(watermark)
        items = []
        for row in rows:
            record = row.asDict(recursive=True)
            side = int(record[_SIDE])
            element = record["__l"] if side == 0 else record["__r"]
            part, offset = record.get(PART), record.get(OFFSET)
            order = (millis(record[TS]), -1 if part is None else part, -1 if offset is None else offset)
            items.append((order, side, json.dumps(element, sort_keys=True, default=repr), element))
        for order, side, _, element in sorted(items, key=lambda item: item[:3]):
            windows.add({"side": side, "element": element}, order, watermark)
        self._store(windows, watermark)
        return iter(out)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        """Close the windows the watermark passed, for a key without rows in this epoch (idempotent)."""
        watermark = timerValues.getCurrentWatermarkInMs()
        out: list[Row] = []
        windows = self._load(key[0], out)
        windows.advance(watermark)
        self._store(windows, watermark)
        return iter(out)

    def close(self) -> None:
        """Nothing to release."""

    def _load(self, key: Any, out: list[Row]) -> KeyWindows:
        def fire(pane: Pane, late: bool) -> None:
            out.extend(self._rows(key, TimeWindow(pane.start, pane.end), pane.contents))

        contents = JoinContents(self.plan.keeps_right)
        return KeyWindows(self.plan.window, contents, fire, dict(self.panes.items()))

    def _rows(self, key: Any, window: TimeWindow, contents: dict[str, Any]) -> list[Row]:
        start, end, ts = timestamp(window.start), timestamp(window.end), timestamp(window.end - 1)
        rows = []
        # A null key equals nothing (SQL semantics, as in the native joins): its elements never have a partner.
        partners = contents["r"] if key is not None else ([] if self.plan.keeps_right else 0)
        lefts = contents["l"]
        if key is None and self.plan.keeps_right:
            pairs = join_window(self.plan.how, lefts, []) + join_window(self.plan.how, [], contents["r"])
        else:
            pairs = join_window(self.plan.how, lefts, partners)
        for left, right in pairs:
            lvalue = None if left is None else tuple(left.get(f) for f in self.plan.left_fields)
            rvalue = None if right is None else tuple(right.get(f) for f in self.plan.right_fields)
            rows.append(self.row(lvalue, rvalue, start, end, ts, key))
        return rows

    def _store(self, windows: KeyWindows, watermark: int) -> None:
        for window in sorted(windows.removed):
            self.panes.remove(window)
        for window in sorted(windows.changed):
            self.panes.put(window, windows.panes[window])
        wanted = windows.timers(watermark)
        existing = set(self.handle.listTimers())
        for at in sorted(wanted - existing):
            self.handle.registerTimer(at)
        for at in sorted(existing - wanted):
            if at > watermark:
                self.handle.deleteTimer(at)
