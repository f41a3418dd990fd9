"""The process-function operator: a user's `KeyedProcessFunction` on Spark's transformWithState.

Per key and epoch (W = the epoch's watermark, P = its processing time, the logged batch timestamp, B = the
out-of-orderness bound of the input's watermark strategy):

1. **Timers first**: every timer that is due fires, in time order — event-time timers at or before W, then
   processing-time timers at or before P — including timers `on_timer` registers that are already due (Flink
   fires those in the same watermark advance);
2. the key's **elements** of the epoch, in `element_order` (event time, source partition, offset, content). Before
   each element e the key's watermark moves to max(W, e's event time - B - 1 ms) — the watermark a stream in
   event-time order has once it reaches e (Flink's formula) — and the event-time timers it passes fire, in time
   order, with those their `on_timer` registers that are due too. `current_watermark()` is that watermark. Late
   elements are not dropped: a process function sees every element (`ctx.timestamp()` tells how old it is);
3. timers that became due during the elements fire (a timer registered at or before the key's watermark).

Keys without elements in the epoch get steps 1 and 3 when Spark calls their expired timers (after every key's
elements — which cannot change what a key sees, state being per key). The watermark a key reaches in step 2 never
passes the one Spark computes for the next epoch (the largest event time read so far minus B), so nothing fires
twice or backwards. Everything here is a pure function of the key's state, its elements, W and P, all fixed by
Spark's offset log: a replayed epoch fires the same timers at the same places. Without a known bound (no watermark
strategy upstream, or several), step 2 does not move the watermark: timers fire at W only.

Time modes (one per operator, Spark's rule): `event` runs Spark's EventTime mode — event-time timers are Spark
timers; processing-time timers raise `KeyedStateError` at registration, since epochs only run when data arrives.
`processing` runs ProcessingTime mode — Spark runs an epoch every trigger interval even without data, so
processing-time timers fire on time; event-time timers are emulated by polling (see `timers`), which needs a
watermarked input. `auto` is `event` on a watermarked stream, else `processing`. Processing time does not move
within an epoch: processing-time timers fire at P only (steps 1 and 3).

Outputs: main elements (dicts of exactly the main output's fields, checked by `plan.conform`) with the element's
event time (an element's output) or the timer's time (an event-time timer's output; a processing-time timer's output
has none), and side outputs via `ctx.output(tag, value)` in `__tag`/`__side_<tag>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from ethereal_kafka.api.functions import KeyedContext, TimerService
from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.plan.conform import Mismatch, describe_origin
from ethereal_kafka.plan.errors import user_error
from ethereal_kafka.plan.operators.base import OutputLayout, millis, sorted_rows, timestamp, user_element
from ethereal_kafka.plan.operators.keyed_state import (
    CELL,
    KeyedRuntimeContext,
    KeyedStateError,
    Scope,
    dumps,
    loads,
)
from ethereal_kafka.plan.operators.timers import EVENT, PROCESSING, TimerBook
from ethereal_kafka.plan.pyfuncs import as_element
from ethereal_kafka.plan.schema import KEY, OFFSET, PART, TS
from ethereal_kafka.plan.user_errors import OperatorErrors

#: How many timers one call may fire before the operator assumes `on_timer` keeps registering due timers.
MAX_FIRINGS = 100_000
BOOK = "_ek_timers"


@dataclass(frozen=True)
class ProcessSpec:
    """What a process-function operator runs (built on the driver, pickled to executors).

    Attributes:
        label: The operator's name for messages (`process#4`).
        function: The user's KeyedProcessFunction.
        mode: `event` or `processing` (already resolved from `auto`).
        event_time: The input is watermarked (event-time timers allowed).
        key_fields: The key's fields (a struct key's order), empty for a selector key.
        layout: The output rows' user fields and side outputs, with the types their elements must have.
        columns: Every output column, in order (user fields, `__ts`, `__key`, then `__tag` and side columns).
        topics: The source topic(s) of the elements, for messages.
        bound_ms: The input's out-of-orderness bound B, by which a key's watermark follows its elements within an
            epoch (see the module docstring); None: unknown, timers fire at the epoch's watermark only.
        on_error: What to do when `process_element` raises (`plan.user_errors`; None: fail). An element it
            skips or dead-letters emits nothing (rows it emitted before raising are dropped); state it changed
            before raising stays changed. Errors in `on_timer` and `open` always fail the epoch.
        keyed: False for a non-keyed `CoProcessFunction` (`plan.operators.coprocess`): the rows' `__key` is a
            bucket, not a key — no `open`, no keyed state, no timers, `get_current_key()` is None.
    """

    label: str
    function: Any
    mode: str
    event_time: bool
    key_fields: tuple[str, ...]
    layout: OutputLayout
    columns: tuple[str, ...]
    topics: str = ""
    bound_ms: int | None = None
    on_error: OperatorErrors | None = None
    keyed: bool = True


def user_key(value: Any, key_fields: tuple[str, ...]) -> Any:
    """The key as `ctx.get_current_key()` shows it: the value for one field or a selector, a tuple of the fields'
    values for several."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, dict):
        names = key_fields or tuple(value)
        return tuple(value.get(n) for n in names)
    return value


class _Call:
    """One call of the operator for one key: clocks, the key, the rows it produces."""

    def __init__(self, watermark: int, now: int, book: TimerBook, stored: bool) -> None:
        self.epoch_watermark = watermark  # Spark's, for the whole epoch (the TTL cleanup timer follows it)
        self.watermark = watermark  # the key's: moves with its elements (step 2 of the module docstring)
        self.now = now
        self.book = book
        self.stored = stored  # the key had a book in the state store before this call
        self.rows: list[tuple[Any, ...]] = []
        self.ts: Any = None  # the current element's or timer's `__ts`
        self.timestamp: int | None = None  # the same, in ms, for ctx.timestamp()
        self.row: dict[str, Any] | None = None  # the current element's row; None in on_timer

    def origin(self, spec: ProcessSpec) -> str:
        """Where the current element came from, or which timer is firing (for messages)."""
        if self.row is not None:
            return describe_origin(spec.topics, self.row.get(PART), self.row.get(OFFSET))
        return f"the timer at {self.timestamp} of key {user_key(self.book.key, spec.key_fields)!r}"


class _Context(KeyedContext, TimerService):
    """The `KeyedContext` (and its `TimerService`) handed to the user's function."""

    def __init__(self, spec: ProcessSpec, call: _Call) -> None:
        self._spec = spec
        self._call = call
        self._tags = {t: i for i, t in enumerate(spec.layout.tags)}

    # -- KeyedContext --------------------------------------------------------------------------------------------
    def get_current_key(self) -> Any:
        if not self._spec.keyed:
            return None
        return user_key(self._call.book.key, self._spec.key_fields)

    def timestamp(self) -> int | None:
        return self._call.timestamp

    def timer_service(self) -> TimerService:
        if not self._spec.keyed:
            raise KeyedStateError(
                f"{self._spec.label}: timers need keyed streams (as in Flink): key both inputs, "
                "a.key_by(k).connect(b.key_by(k)), and use a KeyedCoProcessFunction"
            )
        return self

    def output(self, tag: OutputTag, value: dict[str, Any]) -> None:
        name = tag.name if isinstance(tag, OutputTag) else str(tag)
        if name not in self._tags:
            raise KeyedStateError(
                f"{self._spec.label}: ctx.output to side output {name!r}, which is not declared: pass it in "
                "process(..., side_outputs=[tag])"
            )
        element = as_element(value, self._spec.label)
        call, layout = self._call, self._spec.layout
        try:
            row = layout.side(name, element, call.ts, call.book.key)
        except Mismatch as bad:
            shape = layout.type_of(name)
            raise shape.error(bad, call.origin(self._spec), element, self._spec.label) from None
        call.rows.append(row)

    # -- TimerService --------------------------------------------------------------------------------------------
    def current_watermark(self) -> int:
        return self._call.watermark

    def current_processing_time(self) -> int:
        return self._call.now

    def register_event_time_timer(self, timestamp: int) -> None:
        if not self._spec.event_time:
            raise KeyedStateError(
                f"{self._spec.label}: an event-time timer needs event time: call "
                "assign_timestamps_and_watermarks(...) before key_by"
            )
        self._call.book.add(EVENT, timestamp)

    def register_processing_time_timer(self, timestamp: int) -> None:
        if self._spec.mode != PROCESSING:
            raise KeyedStateError(
                f"{self._spec.label}: processing-time timers need process(..., time_mode='processing'): this "
                "operator runs in event-time mode, where Spark runs no epoch without data, so the timer could not "
                "fire on time"
            )
        self._call.book.add(PROCESSING, timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._call.book.pop(EVENT, int(timestamp))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._call.book.pop(PROCESSING, int(timestamp))


class KeyedProcessor(StatefulProcessor):
    """Runs a `ProcessSpec` per key (see the module docstring). Spark calls `init` once per task (and once on the
    driver, to learn the state variables), then `handleInputRows` per key with rows, then `handleExpiredTimer`
    per due Spark timer, then `close`."""

    def __init__(self, spec: ProcessSpec) -> None:
        self._spec = spec

    def init(self, handle: Any) -> None:
        from pyspark.sql import Row

        spec = self._spec
        self._handle = handle
        self._scope = Scope()
        self._runtime = KeyedRuntimeContext(handle, self._scope, spec.label)
        self._book_state = handle.getValueState(BOOK, CELL)
        self._row = Row(*spec.columns)
        if spec.keyed:
            self._runtime.open_function(spec.function)
        else:
            self._runtime.seal()

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        ordered = self.ordered(rows)
        raw = self._book_state.get()
        book = TimerBook.unpack(loads(raw[0])) if raw is not None else TimerBook()
        book.key = ordered[0].get(KEY) if ordered else key[0]
        call = self._begin(timerValues, book, raw is not None)
        context = _Context(self._spec, call)
        self._fire_due(call, context)
        bound = self._spec.bound_ms
        for row in ordered:
            stamp = row.get(TS)
            if bound is not None and stamp is not None:
                self._advance(call, context, millis(stamp) - bound - 1)
            call.ts = stamp
            call.timestamp = millis(stamp) if stamp is not None else None
            call.row = row
            method, element = self.handler(row)
            self._run(method, element, context, call, row)
            call.row = None
        self._fire_due(call, context)
        if self._spec.on_error is not None and not self._spec.on_error.fails:
            self._spec.on_error.flush()
        return self._finish(call)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        raw = self._book_state.get()
        if raw is None:  # fired already, when the key's elements of this epoch were handled
            return iter(())
        book = TimerBook.unpack(loads(raw[0]))
        call = self._begin(timerValues, book, True)
        self._fire_due(call, _Context(self._spec, call))
        # Spark deletes the firing timer after this call; nothing the key still needs is at or before it.
        book.registered.discard(expiredTimerInfo.getExpiryTimeInMs())
        return self._finish(call)

    def close(self) -> None:
        pass

    # -- what a subclass may change (`plan.operators.coprocess`) -------------------------------------------------
    def ordered(self, rows: Iterator[Any]) -> list[dict[str, Any]]:
        """A key's input rows of the epoch as dicts, in the order the function sees them (`element_order`)."""
        return sorted_rows(rows)

    def handler(self, row: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The user method that handles `row`, and the element it is given."""
        return self._spec.function.process_element, user_element(row)

    # -- steps ---------------------------------------------------------------------------------------------------
    def _begin(self, timer_values: Any, book: TimerBook, stored: bool) -> _Call:
        now = int(timer_values.getCurrentProcessingTimeInMs())
        self._scope.begin(now)
        return _Call(int(timer_values.getCurrentWatermarkInMs()), now, book, stored)

    def _advance(self, call: _Call, context: _Context, watermark: int) -> None:
        """Move the key's watermark to `watermark` (never back) and fire the timers it passes."""
        if watermark > call.watermark:
            call.watermark = watermark
            self._fire_due(call, context)

    def _fire_due(self, call: _Call, context: _Context) -> None:
        book = call.book
        for _ in range(MAX_FIRINGS):
            due = book.next_due(call.watermark, call.now)
            if due is None:
                break
            kind, at = due
            book.pop(kind, at)
            call.ts = timestamp(at) if kind == EVENT else None
            call.timestamp = at
            self._run(self._spec.function.on_timer, at, context, call, None)
        else:
            raise KeyedStateError(
                f"{self._spec.label}: on_timer registered due timers {MAX_FIRINGS} times in a row for key "
                f"{context.get_current_key()!r}; register timers after the current time"
            )
        threshold = call.epoch_watermark if self._spec.mode == EVENT else call.now
        if book.cleanup_due(threshold):
            book.disarm_cleanup()
            self._scope.note(self._runtime.sweep())

    def _run(
        self, method: Any, argument: Any, context: _Context, call: _Call, row: dict[str, Any] | None
    ) -> None:
        spec = self._spec
        layout = spec.layout
        emitted = len(call.rows)
        try:
            for value in _outputs(method(argument, context)):
                element = as_element(value, spec.label)
                try:
                    call.rows.append(layout.main(element, call.ts, call.book.key))
                except Mismatch as bad:
                    raise layout.type_of(None).error(bad, call.origin(spec), element, spec.label) from None
        except EtherealKafkaError:
            raise
        except Exception as exc:
            key = f"key {context.get_current_key()!r}"
            if row is None:
                raise user_error(spec.label, exc, f"{key}, timer {argument}") from exc
            where = f"{key}, element from {describe_origin(spec.topics, row.get(PART), row.get(OFFSET))}"
            if spec.on_error is None:
                raise user_error(spec.label, exc, where) from exc
            del call.rows[emitted:]  # a skipped or dead-lettered element emits nothing
            spec.on_error.handle(exc, argument, row.get(PART), row.get(OFFSET), where)

    def _finish(self, call: _Call) -> Iterator[Any]:
        book = call.book
        mode = self._spec.mode
        if self._scope.earliest is not None:
            book.arm_cleanup(self._scope.earliest, mode, call.epoch_watermark, call.now)
        book.plan_poll(mode, call.now)
        book.sync(mode, self._handle.registerTimer, self._handle.deleteTimer)
        if book.is_empty():
            if call.stored:
                self._book_state.clear()
        else:
            self._book_state.update((dumps(book.pack()),))
        return iter([self._row(*values) for values in call.rows])


def _outputs(produced: Iterable[Any] | dict[str, Any] | None) -> Iterable[Any]:
    """What a user method produced, as an iterable: None → nothing, one dict → itself."""
    if produced is None:
        return ()
    return (produced,) if isinstance(produced, dict) else produced
