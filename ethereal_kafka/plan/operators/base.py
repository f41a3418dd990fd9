"""What every framework operator shares: a keyed `StatefulProcessor` on Spark's transformWithState (Row-based),
deterministic element order, pickled state, and rows for the main and side outputs.

Time (see SPARK-NOTES.md): operators run in Spark's `EventTime` mode over input whose `__ts` column has lost its
watermark metadata (`strip_watermark`), so Spark does not drop late rows before the operator sees them; the
operator decides what is late from the epoch's watermark (`Times.watermark`, Spark's eviction watermark: the
largest event time of earlier epochs minus the bound) and routes late rows itself. Event-time timers fire after
the epoch's input rows, for every timer at or before the watermark — including timers registered in this epoch.

Order: within an epoch, a key's rows arrive in no particular order; `Elements` sorts them by event time, then
source partition and offset, then content, so a replayed epoch processes them identically.

State values are pickled into binary columns; keep them small (one accumulator, not every element, unless the
operator must buffer).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.plan.conform import ElementType
from ethereal_kafka.plan.schema import KEY, OFFSET, PART, SEQ, TS, is_hidden

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
    from pyspark.sql.types import StructType

#: Schema of a state value holding one pickled Python value.
PICKLED = "v binary"

MIN_TIME = -(2**62)


@dataclass(frozen=True)
class Times:
    """The epoch's clocks as Spark gives them to a processor.

    Attributes:
        watermark: Event-time watermark in ms (Spark reports 0 before the first watermark).
        processing_time: The epoch's batch timestamp in ms (logged by Spark: the same when the epoch is replayed).
    """

    watermark: int
    processing_time: int


@dataclass(frozen=True)
class OutputLayout:
    """The columns an operator's rows have, in order: user fields, `__ts`, `__key`, then (with side outputs)
    `__tag` and one struct column per side output.

    Attributes:
        fields: The main output's user fields.
        tags: Side output names, in column order.
        tag_fields: For each tag, its user fields.
        main_type: What the main output's elements must be (see `plan.conform`); default: its field names, any
            values.
        tag_types: The same for each tag.
    """

    fields: tuple[str, ...]
    tags: tuple[str, ...] = ()
    tag_fields: tuple[tuple[str, ...], ...] = ()
    main_type: ElementType | None = None
    tag_types: tuple[ElementType, ...] = ()

    def __post_init__(self) -> None:
        if self.main_type is None:
            object.__setattr__(self, "main_type", ElementType.names_only(self.fields))
        if not self.tag_types:
            types = tuple(
                ElementType.names_only(names, what=f"side output '{tag}'")
                for tag, names in zip(self.tags, self.tag_fields, strict=True)
            )
            object.__setattr__(self, "tag_types", types)

    def main(self, element: dict[str, Any], ts: Any, key: Any) -> tuple[Any, ...]:
        """A main-output row.

        Raises:
            Mismatch: `element` does not fit the main output's type (the operator names where it came from).
        """
        assert self.main_type is not None
        values = self.main_type.values(element)
        tail: list[Any] = [ts, key]
        if self.tags:
            tail += [None] + [None] * len(self.tags)
        return (*values, *tail)

    def side(self, tag: str, element: dict[str, Any], ts: Any, key: Any) -> tuple[Any, ...]:
        """A row of side output `tag` (main fields null).

        Raises:
            Mismatch: `element` does not fit the tag's type.
        """
        index = self.tags.index(tag)
        sides: list[Any] = [None] * len(self.tags)
        sides[index] = self.tag_types[index].values(element)
        return (*([None] * len(self.fields)), ts, key, tag, *sides)

    def type_of(self, tag: str | None) -> ElementType:
        """The element type of the main output (None) or of side output `tag`."""
        if tag is None:
            assert self.main_type is not None
            return self.main_type
        return self.tag_types[self.tags.index(tag)]


def strip_watermark(frame: DataFrame) -> DataFrame:
    """`frame` with `__ts` rebuilt as a plain expression: it loses Spark's watermark metadata, so transformWithState
    in EventTime mode hands late rows to the operator instead of dropping them (the query keeps its watermark)."""
    from pyspark.sql import functions as F

    if TS not in frame.columns:
        return frame
    return frame.withColumn(TS, F.timestamp_micros(F.unix_micros(F.col(TS))))


def transform(
    frame: DataFrame,
    processor: Any,
    output: StructType,
    time_mode: str = "EventTime",
    initial: DataFrame | None = None,
    label: str = "",
) -> DataFrame:
    """Run `processor` per `__key` over `frame` (append mode); each output row gets `__seq` (see `Sequenced`).
    `initial`: the operator's state restored from a savepoint (rows of `checkpoint.savepoints`' table, which
    `Sequenced.handleInitialState` writes into the state variables the processor declares); `label` names the
    operator in a restore's errors."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    numbered = StructType([*output.fields, StructField(SEQ, LongType(), False)])
    grouped = strip_watermark(frame).groupBy(F.col(KEY))
    sequenced = Sequenced(processor, tuple(numbered.fieldNames()), label)
    if initial is None:
        return grouped.transformWithState(sequenced, numbered, "append", time_mode)
    return grouped.transformWithState(
        sequenced, numbered, "append", time_mode, initialState=initial.groupBy(F.col(KEY))
    )


#: The `var` of a savepoint row holding a registered timer (its time in `ordinal`; see `checkpoint.savepoints`).
TIMERS_VAR = "@timers"

#: Sequence numbers of rows emitted by timers start here (after any key's input rows of the epoch).
_TIMER_SEQ_BASE = 1 << 50


class Restoring(StatefulProcessor):
    """Wraps a processor: delegates every call Spark makes to it, and restores its state from a savepoint. The
    wrapped processor declares its state variables through a handle that records them, and `handleInitialState`
    writes each restored row into the variable it names (see `checkpoint.savepoints`). What `transform` and the
    framework's join (which needs no `__seq`) give Spark."""

    def __init__(self, inner: Any, label: str = "") -> None:
        self.inner = inner
        self.label = label
        self._handle: Any = None
        self._lists: dict[tuple[Any, str], list[tuple[int, bytes]]] = {}

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Delegate, through a handle that records the state variables the wrapped processor declares."""
        self._handle = _RecordingHandle(handle)
        self.inner.init(self._handle)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        """Delegate."""
        return self.inner.handleInputRows(key, rows, timerValues)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        """Delegate (nothing when the wrapped processor has no timers)."""
        handler = getattr(self.inner, "handleExpiredTimer", None)
        return iter(()) if handler is None else handler(key, timerValues, expiredTimerInfo)

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        """Write one restored row into the state variable it names: a value's cell, a map entry, one element of a
        list (at its position: appended when it comes next, as it does when the table is read in order, else the
        key's list is put again, sorted), or a registered timer.

        Raises:
            RestoreError: the row names a state variable this version of the operator does not declare.
        """
        var = initialState["var"]
        if var == TIMERS_VAR:
            self._handle.registerTimer(int(initialState["ordinal"]))
            return
        declared = self._handle.declared.get(var)
        if declared is None:
            raise RestoreError(
                f"{self.label or 'an operator'}: the savepoint holds state {var!r}, which this version does not "
                f"declare (it declares {', '.join(sorted(self._handle.declared)) or 'none'})"
            )
        kind, state = declared
        value = initialState["value"]
        if kind == "value":
            state.update((value,))
        elif kind == "map":
            raw = initialState["map_key"]
            parts = unpack_key(raw) if self._handle.key_fields.get(var, 1) > 1 else (raw,)
            state.updateValue(parts, (value,))
        else:
            elements = self._lists.setdefault((key, var), [])
            ordinal = int(initialState["ordinal"])
            in_order = not elements or elements[-1][0] < ordinal
            elements.append((ordinal, value))
            if in_order:
                state.appendValue((value,))
            else:
                elements.sort()
                state.put([(v,) for _, v in elements])

    def close(self) -> None:
        """Delegate."""
        closer = getattr(self.inner, "close", None)
        if closer is not None:
            closer()


class Sequenced(Restoring):
    """Wraps a processor and appends `__seq` to every row it emits: the row's position in the key's output of the
    epoch — input rows first (0, 1, ...), then each expired timer's rows, in timer order. The exactly-once sink
    sorts a task's records by key and `__seq`, so a key's records reach Kafka in the order the operator emitted
    them (and the same order when the epoch is replayed).

    Spark calls it as its `StatefulProcessor`; it delegates every call to the wrapped one and restores state as
    `Restoring` does.
    """

    def __init__(self, inner: Any, names: tuple[str, ...], label: str = "") -> None:
        super().__init__(inner, label)
        self.names = names
        self._row: Any = None

    def _make(self, values: tuple[Any, ...]) -> Row:
        if self._row is None:
            from pyspark.sql import Row

            self._row = Row(*self.names)
        return self._row(*values)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        """The wrapped processor's rows, numbered 0, 1, ..."""
        for index, row in enumerate(self.inner.handleInputRows(key, rows, timerValues)):
            yield self._make((*row, index))

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        """The wrapped processor's rows, numbered after the epoch's input rows, in timer order."""
        handler = getattr(self.inner, "handleExpiredTimer", None)
        if handler is None:
            return
        base = _TIMER_SEQ_BASE + max(0, int(expiredTimerInfo.getExpiryTimeInMs())) * 1024
        for index, row in enumerate(handler(key, timerValues, expiredTimerInfo)):
            yield self._make((*row, base + index))


def unpack_key(packed: bytes) -> tuple[bytes, ...]:
    """The fields of a map key a savepoint packed (`runtime.savepoint`: each field a 4-byte big-endian length, then
    its bytes)."""
    parts, at = [], 0
    while at < len(packed):
        size = int.from_bytes(packed[at : at + 4], "big")
        parts.append(bytes(packed[at + 4 : at + 4 + size]))
        at += 4 + size
    return tuple(parts)


class RestoreError(EtherealKafkaError):
    """State restored from a savepoint does not fit the operator (the message names the operator and the state)."""


class _RecordingHandle:
    """A `StatefulProcessorHandle` that records each state variable declared through it, `{name: (kind, state)}`
    (`value`, `list`, `map`); everything else goes to the handle it wraps."""

    def __init__(self, handle: Any) -> None:
        self._inner = handle
        self.declared: dict[str, tuple[str, Any]] = {}
        self.key_fields: dict[str, int] = {}  # per map: the fields of its key

    def getValueState(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._record(name, "value", self._inner.getValueState(name, *args, **kwargs))

    def getListState(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._record(name, "list", self._inner.getListState(name, *args, **kwargs))

    def getMapState(self, name: str, *args: Any, **kwargs: Any) -> Any:
        state = self._inner.getMapState(name, *args, **kwargs)
        schema: Any = args[0] if args else kwargs.get("userKeySchema")
        fields = getattr(schema, "fields", None)
        self.key_fields[name] = len(fields) if fields is not None else str(schema).count(",") + 1
        return self._record(name, "map", state)

    def _record(self, name: str, kind: str, state: Any) -> Any:
        self.declared[name] = (kind, state)
        return state

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        setattr(self, name, found)  # looked up once: timers are registered and listed per key on the hot path
        return found


def element_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Sort key of an input row: event time, source partition, source offset, then its content."""
    return (*_position(row), _content(row))


def _position(row: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The first three parts of `element_order`: event time, source partition, source offset."""
    ts = row.get(TS)
    stamp = (
        ts.timestamp()
        if ts is not None and hasattr(ts, "timestamp")
        else (ts if ts is not None else MIN_TIME)
    )
    part = row.get(PART)
    offset = row.get(OFFSET)
    return (stamp, -1 if part is None else part, -1 if offset is None else offset)


def _content(row: dict[str, Any]) -> str:
    """The last part of `element_order`: the row's visible fields as sorted JSON."""
    return json.dumps({k: v for k, v in row.items() if not is_hidden(k)}, sort_keys=True, default=repr)


def sorted_rows(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """The rows of one key in one epoch, as dicts (nested Rows too), in `element_order`.

    The content is only rendered for rows whose position (event time, partition, offset) another row shares (the
    elements a `flat_map` made of one record, rows without a source position): the order is the same as sorting
    on `element_order` (both sorts are stable), without a JSON rendering per row.
    """
    keyed = sorted(
        ((_position(d), d) for d in (row.asDict(recursive=True) for row in rows)), key=itemgetter(0)
    )
    out: list[dict[str, Any]] = []
    for _, tied in groupby(keyed, key=itemgetter(0)):
        same = [d for _, d in tied]
        out.extend(same if len(same) == 1 else sorted(same, key=_content))
    return out


def user_element(row: dict[str, Any]) -> dict[str, Any]:
    """The user's view of a row: its non-hidden fields."""
    return {k: v for k, v in row.items() if not is_hidden(k)}


def millis(ts: Any) -> int:
    """Epoch milliseconds of a timestamp value (datetime or number)."""
    if ts is None:
        return MIN_TIME
    if hasattr(ts, "timestamp"):
        return round(ts.timestamp() * 1000)
    return int(ts)


def timestamp(ms: int) -> Any:
    """A UTC datetime for epoch milliseconds (for `__ts` and window bounds)."""
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


class PickledValue:
    """A ValueState holding one pickled Python value (None when absent)."""

    def __init__(self, handle: StatefulProcessorHandle, name: str) -> None:
        self._state = handle.getValueState(name, PICKLED)

    def get(self) -> Any:
        """The value, or None."""
        if not self._state.exists():
            return None
        raw = self._state.get()
        return pickle.loads(raw[0]) if raw is not None else None

    def set(self, value: Any) -> None:
        """Store `value` (None clears)."""
        if value is None:
            self._state.clear()
        else:
            self._state.update((pickle.dumps(value, protocol=5),))

    def clear(self) -> None:
        """Remove the value."""
        self._state.clear()


class PickledMap:
    """A MapState from pickled keys to pickled values, iterated in the order of the pickled keys."""

    def __init__(self, handle: StatefulProcessorHandle, name: str) -> None:
        self._state = handle.getMapState(name, "k binary", PICKLED)

    def get(self, key: Any) -> Any:
        """The value of `key`, or None."""
        raw_key = (pickle.dumps(key, protocol=5),)
        if not self._state.containsKey(raw_key):
            return None
        raw = self._state.getValue(raw_key)
        return pickle.loads(raw[0]) if raw is not None else None

    def put(self, key: Any, value: Any) -> None:
        """Set `key` to `value`."""
        self._state.updateValue((pickle.dumps(key, protocol=5),), (pickle.dumps(value, protocol=5),))

    def remove(self, key: Any) -> None:
        """Remove `key` (no error when absent)."""
        raw_key = (pickle.dumps(key, protocol=5),)
        if self._state.containsKey(raw_key):
            self._state.removeKey(raw_key)

    def remove_stored(self, key: Any) -> None:
        """Remove `key`, which the caller read from this map in the same call (one state call, not two)."""
        self._state.removeKey((pickle.dumps(key, protocol=5),))

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every entry, ordered by the pickled key bytes (deterministic)."""
        entries = sorted(((k[0], v[0]) for k, v in self._state.iterator()), key=lambda kv: kv[0])
        for raw_key, raw_value in entries:
            yield pickle.loads(raw_key), pickle.loads(raw_value)

    def clear(self) -> None:
        """Remove every entry."""
        self._state.clear()
