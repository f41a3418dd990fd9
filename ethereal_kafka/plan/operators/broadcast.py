"""The broadcast operator: a user's `KeyedBroadcastProcessFunction` or `BroadcastProcessFunction` over a stream
connected with a broadcast stream, on Spark's transformWithState.

**Buckets.** The operator groups rows by bucket, not by key: an element of the (keyed or not) first input goes to
bucket `hash(key) mod BUCKETS` (unkeyed: a hash of its source position and content), and every element of the
broadcast input goes to *every* bucket (the compiler replicates it). So each of the operator's Spark calls sees,
for one bucket, the epoch's broadcast elements and its share of the other input's, and every bucket folds the same
broadcast elements in the same order into its own copy of the broadcast state: the copies are equal, without any
exchange between tasks. `BUCKETS` is fixed for a job's life (the state is laid out by it).

**Order.** A bucket's rows of an epoch meet the function in the connected order (`coprocess.connected_order`):
event time, then input (the non-broadcast input before the broadcast one at equal event time), then source
partition and offset. An element therefore reads the broadcast state as the broadcast elements before it in that
order left it, the same in every bucket and on every replay of the epoch (Spark versions the state with the
checkpoint: a replayed epoch starts from the state as of the epoch's start).

**State.** The broadcast state (one dict per `MapStateDescriptor` name) is one pickled value of the bucket. Keyed
state is the process function's (`plan.operators.keyed_state`: same cells and TTL) namespaced by user key inside the
bucket (`plan.operators.namespaced`); the bucket also records the keys it has seen, which
`ctx.apply_to_keyed_state` visits in the order of their pickled bytes.

**Outputs.** What `process_element` yields carries the element's event time and key. What
`process_broadcast_element` yields (and its side outputs) is kept from bucket 0 only: emitted once per broadcast
element (Flink emits it once per parallel instance). Outputs are checked against the declared types like a process
function's (one line naming the operator).

**Timers** (keyed functions that define `on_timer`; the compiler then runs the operator in the function's time
mode, `plan.operators.process`'s rules): each user key has its own `timers.TimerBook`, kept in the bucket's
`_ek_timers` map under the pickled user key; the bucket's Spark timers are the union of what its keys' books need
(the set registered is kept in `_ek_spark_timers`). A bucket's call runs the process operator's steps, over all its
keys: (1) every due timer fires; (2) before each row (keyed or broadcast) in the connected order, the bucket's
watermark moves to max(W, the row's event time - B - 1 ms) and the timers it passes fire; (3) timers that became due
fire. Due timers fire in time order, event-time before processing-time, and at equal times in the order of the keys'
pickled bytes. Since rows are in event-time order, the watermark a key's element meets is the one the process
operator gives it. `on_timer` has the key's keyed state and reads the broadcast state as the rows before it left it.
The TTL cleanup timer of keyed state is per key too (armed from the expiries a key's writes report); without
timers (no `on_timer`) expired keyed state is only deleted when read. A call reads every book of its bucket.

**User errors** (`on.user.error`): a `process_element` that raises is failed, skipped or dead-lettered as in the
process operator (`plan.user_errors`; its rows are dropped, its state changes stay). Errors in
`process_broadcast_element`, `on_timer` and `open` always fail the epoch: a broadcast element is handled once per
bucket, and skipping a rule change in silence would leave every later decision wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from ethereal_kafka.api.functions import BroadcastContext, ReadOnlyBroadcastContext, TimerService
from ethereal_kafka.api.state import MapState
from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.plan.conform import Mismatch, describe_origin
from ethereal_kafka.plan.errors import user_error
from ethereal_kafka.plan.operators.base import OutputLayout, millis, timestamp
from ethereal_kafka.plan.operators.coprocess import FIRST, INPUT, SECOND, connected_order
from ethereal_kafka.plan.operators.keyed_state import CELL, MAP_KEY, KeyedRuntimeContext, Scope, dumps, loads
from ethereal_kafka.plan.operators.namespaced import Namespace, NamespacedHandle
from ethereal_kafka.plan.operators.process import MAX_FIRINGS, user_key
from ethereal_kafka.plan.operators.timers import EVENT, PROCESSING, TimerBook
from ethereal_kafka.plan.pyfuncs import as_element
from ethereal_kafka.plan.schema import OFFSET, PART, TS
from ethereal_kafka.plan.user_errors import OperatorErrors

#: How many buckets the first input is spread over (fixed for a job's life: the state is laid out by it).
BUCKETS = 8
#: The user key column of the operator's input (its `__key` is the bucket).
USER_KEY = "__ukey"
_STATE = "_ek_broadcast"
_KEYS = "_ek_keys"
_BOOKS = "_ek_timers"
_SPARK_TIMERS = "_ek_spark_timers"


class BroadcastStateError(EtherealKafkaError):
    """A broadcast process function used state in a way the operator cannot honour.

    Raised inside the Spark task (the epoch fails and is not committed): a write to the broadcast state in
    `process_element` (it is read-only there: only `process_broadcast_element` may change it, so that every
    parallel instance keeps the same state), a broadcast state not declared in `broadcast(...)`, keyed state or
    `apply_to_keyed_state` in a non-keyed function, a timer where none can be (a non-keyed function, a function
    without `on_timer`, `process_broadcast_element`, or a time domain the operator's time mode cannot fire), or
    `on_timer` registering due timers without end. Fix the function, then restart: the epoch is replayed.
    """


@dataclass(frozen=True)
class BroadcastSpec:
    """What a broadcast operator runs (built on the driver, pickled to executors).

    Attributes:
        label: The operator's name for messages.
        function: The user's function.
        keyed: The first input is keyed (keyed state, `apply_to_keyed_state`).
        states: The broadcast state names (the `MapStateDescriptor`s given to `broadcast`).
        key_fields: The key's fields (a struct key's order), empty for a selector key.
        layout: The output rows' user fields and side outputs, with their types.
        columns: Every output column, in order.
        topics: The source topic(s), for messages.
        mode: `event` or `processing` when the operator has timers (a keyed function with `on_timer`), else None.
        event_time: The inputs have event time (event-time timers allowed).
        bound_ms: The inputs' out-of-orderness bound B, by which the bucket's watermark follows its rows within an
            epoch (see the module docstring); None: unknown, timers fire at the epoch's watermark only.
        on_error: What to do when `process_element` raises (`plan.user_errors`; None: fail).
    """

    label: str
    function: Any
    keyed: bool
    states: tuple[str, ...]
    key_fields: tuple[str, ...]
    layout: OutputLayout
    columns: tuple[str, ...]
    topics: str = ""
    mode: str | None = None
    event_time: bool = False
    bound_ms: int | None = None
    on_error: OperatorErrors | None = None


class BroadcastMap(MapState):
    """A broadcast state: a map, writable only while a broadcast element is processed."""

    def __init__(self, label: str, name: str, entries: dict[Any, Any], call: _Call) -> None:
        self._label, self._name, self._entries, self._call = label, name, entries, call

    def _write(self) -> None:
        if not self._call.writable:
            raise BroadcastStateError(
                f"{self._label}: process_element wrote broadcast state {self._name!r}, which is read-only there; "
                "only process_broadcast_element may change it (every parallel instance must keep the same state)"
            )
        self._call.changed = True

    def get(self, key: Any) -> Any:
        return self._entries.get(key)

    def put(self, key: Any, value: Any) -> None:
        self._write()
        self._entries[key] = value

    def contains(self, key: Any) -> bool:
        return key in self._entries

    def remove(self, key: Any) -> None:
        self._write()
        self._entries.pop(key, None)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(sorted(self._entries.items(), key=lambda kv: dumps(kv[0])))

    def clear(self) -> None:
        self._write()
        self._entries.clear()


class _Call:
    """One call of the operator for one bucket."""

    def __init__(self, bucket: int, watermark: int, now: int, states: dict[str, dict[Any, Any]]) -> None:
        self.bucket = bucket
        self.epoch_watermark = watermark  # Spark's, for the whole epoch (the TTL cleanup timer follows it)
        self.watermark = watermark  # the bucket's: moves with its rows (step 2 of the module docstring)
        self.now = now
        self.states = states
        self.writable = False
        self.changed = False
        self.rows: list[tuple[Any, ...]] = []
        self.key: Any = None  # the current element's or timer's user key (raw); None for a broadcast element
        self.row: dict[str, Any] = {}
        self.timer: int | None = None  # the firing timer's time, in on_timer
        self.books: dict[bytes, TimerBook] = {}  # every key's timers (keyed operators with timers)
        self.stored: set[bytes] = set()  # keys whose book was in the state store before this call
        self.registered: set[int] = set()  # the bucket's Spark timers

    def book(self) -> TimerBook:
        """The current key's timers (a new, empty book for a key without any)."""
        at = dumps(self.key)
        found = self.books.get(at)
        if found is None:
            found = self.books[at] = TimerBook(self.key)
        return found


class _Context(ReadOnlyBroadcastContext, BroadcastContext, TimerService):
    """The context of the three methods (`writable` tells whether a broadcast element runs, `timer` whether a
    timer fires), and the timer service of the current key."""

    def __init__(self, processor: BroadcastProcessor, call: _Call) -> None:
        self._processor = processor
        self._spec = processor.spec
        self._call = call

    def get_broadcast_state(self, descriptor: Any) -> MapState:
        name = getattr(descriptor, "name", descriptor)
        entries = self._call.states.get(name)
        if entries is None:
            raise BroadcastStateError(
                f"{self._spec.label}: no broadcast state {name!r}: the broadcast stream declares "
                f"{', '.join(self._spec.states)} (pass its MapStateDescriptor to broadcast(...))"
            )
        return BroadcastMap(self._spec.label, name, entries, self._call)

    def apply_to_keyed_state(self, descriptor: Any, function: Any) -> None:
        self._processor.apply_to_keyed_state(descriptor, function)

    def get_current_key(self) -> Any:
        if self._call.key is None:
            return None
        return user_key(self._call.key, self._spec.key_fields)

    def timestamp(self) -> int | None:
        if self._call.timer is not None:
            return self._call.timer
        stamp = self._call.row.get(TS)
        return millis(stamp) if stamp is not None else None

    def current_watermark(self) -> int:
        return self._call.watermark

    def current_processing_time(self) -> int:
        return self._call.now

    def timer_service(self) -> TimerService:
        spec = self._spec
        if not spec.keyed:
            raise BroadcastStateError(
                f"{spec.label}: timers belong to a key: connect a keyed stream "
                "(events.key_by(...).connect(rules.broadcast(...))) and use a KeyedBroadcastProcessFunction"
            )
        if spec.mode is None:
            raise BroadcastStateError(
                f"{spec.label}: the function registers timers but defines no on_timer(timestamp, ctx) to fire them"
            )
        if self._call.key is None:
            raise BroadcastStateError(
                f"{spec.label}: process_broadcast_element has no current key, so no timers: register them in "
                "process_element or on_timer"
            )
        return self

    def register_event_time_timer(self, timestamp: int) -> None:
        if not self._spec.event_time:
            raise BroadcastStateError(
                f"{self._spec.label}: an event-time timer needs event time: call "
                "assign_timestamps_and_watermarks(...) on both inputs"
            )
        self._call.book().add(EVENT, timestamp)

    def register_processing_time_timer(self, timestamp: int) -> None:
        if self._spec.mode != PROCESSING:
            raise BroadcastStateError(
                f"{self._spec.label}: processing-time timers need process(..., time_mode='processing'): this "
                "operator runs in event-time mode, where Spark runs no epoch without data, so the timer could not "
                "fire on time"
            )
        self._call.book().add(PROCESSING, timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._call.book().pop(EVENT, int(timestamp))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._call.book().pop(PROCESSING, int(timestamp))

    def output(self, tag: OutputTag, value: dict[str, Any]) -> None:
        name = tag.name if isinstance(tag, OutputTag) else str(tag)
        layout = self._spec.layout
        if name not in layout.tags:
            raise BroadcastStateError(
                f"{self._spec.label}: ctx.output to side output {name!r}, which is not declared: pass it in "
                "process(..., side_outputs=[tag])"
            )
        element = as_element(value, self._spec.label)
        try:
            row = layout.side(name, element, self._call.row.get(TS), self._call.key)
        except Mismatch as bad:
            raise layout.type_of(name).error(
                bad, self._processor.origin(), element, self._spec.label
            ) from None
        self._call.rows.append(row)


class BroadcastProcessor(StatefulProcessor):
    """Runs a `BroadcastSpec` per bucket (see the module docstring). Spark calls `init` once per task (and once on
    the driver), then `handleInputRows` per bucket with rows, then `handleExpiredTimer` per due Spark timer of a
    bucket, then `close`."""

    def __init__(self, spec: BroadcastSpec) -> None:
        self.spec = spec

    def init(self, handle: Any) -> None:
        from pyspark.sql import Row

        spec = self.spec
        self._handle = handle
        self._state = handle.getValueState(_STATE, CELL)
        self._keys = handle.getMapState(_KEYS, MAP_KEY, CELL) if spec.keyed else None
        timed = spec.keyed and spec.mode is not None
        self._books = handle.getMapState(_BOOKS, MAP_KEY, CELL) if timed else None
        self._spark_timers = handle.getValueState(_SPARK_TIMERS, CELL) if timed else None
        self._space = Namespace()
        self._scope = Scope()
        self._runtime = KeyedRuntimeContext(NamespacedHandle(handle, self._space), self._scope, spec.label)
        self._row = Row(*spec.columns)
        self._call: _Call | None = None
        if spec.keyed:
            self._runtime.open_function(spec.function)
        else:
            self._runtime.seal()

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        spec = self.spec
        ordered = sorted((row.asDict(recursive=True) for row in rows), key=connected_order)
        call, context, raw = self._begin(key, timerValues)
        function = spec.function
        self._fire_due(call, context)
        for row in ordered:
            stamp = row.get(TS)
            if spec.bound_ms is not None and stamp is not None:
                self._advance(call, context, millis(stamp) - spec.bound_ms - 1)
            call.row = row
            if row.get(INPUT) == 2:
                call.key, call.writable = None, True
                kept = len(call.rows)
                self._run(function.process_broadcast_element, dict(row.get(SECOND) or {}), context)
                if call.bucket != 0:
                    del call.rows[kept:]  # emitted once: by bucket 0
            else:
                call.writable = False
                if spec.keyed:
                    self._enter(call, row.get(USER_KEY), remember=True)
                else:
                    call.key = row.get(USER_KEY)
                self._run(function.process_element, dict(row.get(FIRST) or {}), context)
        call.row, call.writable = {}, False
        self._fire_due(call, context)
        if spec.on_error is not None and not spec.on_error.fails:
            spec.on_error.flush()
        return self._finish(call, raw)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        call, context, raw = self._begin(key, timerValues)
        self._fire_due(call, context)
        # Spark deletes the firing timer after this call: register it again if a key still needs it.
        call.registered.discard(int(expiredTimerInfo.getExpiryTimeInMs()))
        return self._finish(call, raw)

    def close(self) -> None:
        pass

    # -- steps ---------------------------------------------------------------------------------------------------
    def _begin(self, key: Any, timer_values: Any) -> tuple[_Call, _Context, Any]:
        """Start a call for bucket `key`: the broadcast state, the clocks and (with timers) every key's book."""
        spec = self.spec
        raw = self._state.get()
        stored = loads(raw[0]) if raw is not None else {}
        states = {name: dict(stored.get(name, {})) for name in spec.states}
        now = int(timer_values.getCurrentProcessingTimeInMs())
        self._scope.begin(now)
        call = _Call(int(key[0]), int(timer_values.getCurrentWatermarkInMs()), now, states)
        if self._books is not None and self._books.exists():
            for at, packed in self._books.iterator():  # bytes(): Spark may hand a binary as a bytearray
                call.books[bytes(at[0])] = TimerBook.unpack(loads(packed[0]))
            call.stored = set(call.books)
        if self._spark_timers is not None:
            registered = self._spark_timers.get()
            call.registered = set(loads(registered[0])) if registered is not None else set()
        self._call = call
        return call, _Context(self, call), raw

    def _enter(self, call: _Call, raw_key: Any, remember: bool = False) -> None:
        """Make `raw_key` the current key of keyed state and timers (`remember`: note it for
        `apply_to_keyed_state`). The TTL expiries the previous key's writes reported arm that key's cleanup."""
        self._settle(call)
        call.key = raw_key
        self._space.enter(raw_key)
        if remember:
            assert self._keys is not None
            at = (dumps(raw_key),)
            if not self._keys.containsKey(at):
                self._keys.updateValue(at, (b"",))

    def _settle(self, call: _Call) -> None:
        """Arm the current key's cleanup timer from the expiries its state writes reported (timers only)."""
        earliest, self._scope.earliest = self._scope.earliest, None
        mode = self.spec.mode
        if earliest is None or mode is None or call.key is None:
            return
        call.book().arm_cleanup(earliest, mode, call.epoch_watermark, call.now)

    def _advance(self, call: _Call, context: _Context, watermark: int) -> None:
        """Move the bucket's watermark to `watermark` (never back) and fire the timers it passes."""
        if watermark > call.watermark:
            call.watermark = watermark
            self._fire_due(call, context)

    def _next_due(self, call: _Call) -> tuple[bytes, str, int] | None:
        """The next timer of the bucket to fire: event-time before processing-time, then time, then key bytes."""
        found: tuple[int, int, bytes, str] | None = None
        for at, book in call.books.items():
            due = book.next_due(call.watermark, call.now)
            if due is None:
                continue
            rank = (0 if due[0] == EVENT else 1, due[1], at, due[0])
            if found is None or rank < found:
                found = rank
        return None if found is None else (found[2], found[3], found[1])

    def _fire_due(self, call: _Call, context: _Context) -> None:
        """Fire every due timer of the bucket (and its keys' due TTL cleanups); the current key and row are kept."""
        if self._books is None:
            return
        spec = self.spec
        key, row, writable = call.key, call.row, call.writable
        for _ in range(MAX_FIRINGS):
            due = self._next_due(call)
            if due is None:
                break
            at, kind, when = due
            book = call.books[at]
            book.pop(kind, when)
            self._enter(call, book.key)
            call.row = {TS: timestamp(when)} if kind == EVENT else {}
            call.timer, call.writable = when, False
            try:
                self._run(spec.function.on_timer, when, context, timer=True)
            finally:
                call.timer = None
        else:
            raise BroadcastStateError(
                f"{spec.label}: on_timer registered due timers {MAX_FIRINGS} times in a row; register timers "
                "after the current time"
            )
        threshold = call.epoch_watermark if spec.mode == EVENT else call.now
        for at in sorted(call.books):
            book = call.books[at]
            if book.cleanup_due(threshold):
                book.disarm_cleanup()
                self._enter(call, book.key)
                self._scope.note(self._runtime.sweep())
        self._settle(call)
        call.key, call.row, call.writable = key, row, writable
        self._space.enter(key)

    def _finish(self, call: _Call, raw: Any) -> Iterator[Any]:
        """Store the broadcast state and the books, make the bucket's Spark timers what its keys need; the rows."""
        if call.changed or raw is None:
            self._state.update((dumps(call.states),))
        if self._books is not None and self._spark_timers is not None:
            self._settle(call)
            mode = str(self.spec.mode)
            needed: set[int] = set()
            for at, book in call.books.items():
                book.plan_poll(mode, call.now)
                if book.is_empty():
                    if at in call.stored:
                        self._books.removeKey((at,))
                    continue
                self._books.updateValue((at,), (dumps(book.pack()),))
                needed |= book.needed(mode)
            for stale in sorted(call.registered - needed):
                self._handle.deleteTimer(stale)
            for fresh in sorted(needed - call.registered):
                self._handle.registerTimer(fresh)
            if needed or self._spark_timers.exists():
                self._spark_timers.update((dumps(sorted(needed)),))
        self._call = None
        return iter([self._row(*values) for values in call.rows])

    def apply_to_keyed_state(self, descriptor: Any, function: Any) -> None:
        """`function(key, state)` for every key of the bucket (see `BroadcastContext.apply_to_keyed_state`)."""
        spec = self.spec
        if not spec.keyed or self._keys is None:
            raise BroadcastStateError(
                f"{spec.label}: apply_to_keyed_state needs keyed state: connect a keyed stream "
                "(events.key_by(...).connect(rules.broadcast(...))) and use a KeyedBroadcastProcessFunction"
            )
        name = getattr(descriptor, "name", descriptor)
        state = self._runtime.declared(name)
        if state is None:
            raise BroadcastStateError(
                f"{spec.label}: apply_to_keyed_state: no keyed state {name!r} declared in open()"
            )
        if not self._keys.exists():
            return
        call = self._call
        assert call is not None
        for raw in sorted(k[0] for k, _ in self._keys.iterator()):
            user = loads(raw)
            self._enter(call, user)
            function(user_key(user, spec.key_fields), state)
        self._settle(call)
        call.key = None  # back to the broadcast element, which has no key

    def origin(self) -> str:
        """Where the current element came from, or which timer fires (for messages)."""
        call = self._call
        if call is not None and call.timer is not None:
            return f"the timer at {call.timer} of key {user_key(call.key, self.spec.key_fields)!r}"
        row = call.row if call is not None else {}
        where = describe_origin(self.spec.topics, row.get(PART), row.get(OFFSET))
        return f"broadcast element from {where}" if row.get(INPUT) == 2 else where

    def _run(self, method: Any, argument: Any, context: _Context, timer: bool = False) -> None:
        spec = self.spec
        call = self._call
        assert call is not None
        layout = spec.layout
        emitted = len(call.rows)
        try:
            for value in _outputs(method(argument, context)):
                out = as_element(value, spec.label)
                try:
                    call.rows.append(layout.main(out, call.row.get(TS), call.key))
                except Mismatch as bad:
                    raise layout.type_of(None).error(bad, self.origin(), out, spec.label) from None
        except EtherealKafkaError:
            raise
        except Exception as exc:
            where = self.origin() if timer else f"element from {self.origin()}"
            row = call.row
            if timer or row.get(INPUT) != 1 or spec.on_error is None:
                raise user_error(spec.label, exc, where) from exc
            del call.rows[emitted:]  # a skipped or dead-lettered element emits nothing
            spec.on_error.handle(exc, argument, row.get(PART), row.get(OFFSET), where)


def _outputs(produced: Iterable[Any] | dict[str, Any] | None) -> Iterable[Any]:
    if produced is None:
        return ()
    return (produced,) if isinstance(produced, dict) else produced
