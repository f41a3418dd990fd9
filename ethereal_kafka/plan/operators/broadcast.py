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

Not offered: timers (`ctx.timer_service()` raises `BroadcastStateError`) and the TTL cleanup timer (expired keyed
state is still never read: it is deleted when read).
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
from ethereal_kafka.plan.operators.base import OutputLayout, millis
from ethereal_kafka.plan.operators.coprocess import FIRST, INPUT, SECOND, connected_order
from ethereal_kafka.plan.operators.keyed_state import CELL, MAP_KEY, KeyedRuntimeContext, Scope, dumps, loads
from ethereal_kafka.plan.operators.namespaced import Namespace, NamespacedHandle
from ethereal_kafka.plan.operators.process import user_key
from ethereal_kafka.plan.pyfuncs import as_element
from ethereal_kafka.plan.schema import OFFSET, PART, TS

#: How many buckets the first input is spread over (fixed for a job's life: the state is laid out by it).
BUCKETS = 8
#: The user key column of the operator's input (its `__key` is the bucket).
USER_KEY = "__ukey"
_STATE = "_ek_broadcast"
_KEYS = "_ek_keys"


class BroadcastStateError(EtherealKafkaError):
    """A broadcast process function used state in a way the operator cannot honour.

    Raised inside the Spark task (the epoch fails and is not committed): a write to the broadcast state in
    `process_element` (it is read-only there: only `process_broadcast_element` may change it, so that every
    parallel instance keeps the same state), a broadcast state not declared in `broadcast(...)`, keyed state or
    `apply_to_keyed_state` in a non-keyed function, or a timer. Fix the function, then restart: the epoch is
    replayed.
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
    """

    label: str
    function: Any
    keyed: bool
    states: tuple[str, ...]
    key_fields: tuple[str, ...]
    layout: OutputLayout
    columns: tuple[str, ...]
    topics: str = ""


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

    def __init__(self, bucket: int, watermark: int, states: dict[str, dict[Any, Any]]) -> None:
        self.bucket = bucket
        self.watermark = watermark
        self.states = states
        self.writable = False
        self.changed = False
        self.rows: list[tuple[Any, ...]] = []
        self.key: Any = None  # the current element's user key (raw); None for a broadcast element
        self.row: dict[str, Any] = {}


class _Context(ReadOnlyBroadcastContext, BroadcastContext):
    """The context of both methods (`writable` tells which one runs)."""

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
        stamp = self._call.row.get(TS)
        return millis(stamp) if stamp is not None else None

    def current_watermark(self) -> int:
        return self._call.watermark

    def timer_service(self) -> TimerService:
        raise BroadcastStateError(
            f"{self._spec.label}: timers are not offered to broadcast process functions yet; use a "
            "KeyedCoProcessFunction (connect two keyed streams) when a rule needs timers"
        )

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
    the driver), then `handleInputRows` per bucket with rows, then `close`."""

    def __init__(self, spec: BroadcastSpec) -> None:
        self.spec = spec

    def init(self, handle: Any) -> None:
        from pyspark.sql import Row

        spec = self.spec
        self._state = handle.getValueState(_STATE, CELL)
        self._keys = handle.getMapState(_KEYS, MAP_KEY, CELL) if spec.keyed else None
        self._space = Namespace()
        self._scope = Scope()
        self._runtime = KeyedRuntimeContext(NamespacedHandle(handle, self._space), self._scope, spec.label)
        self._row = Row(*spec.columns)
        self._call: _Call | None = None
        opener = getattr(spec.function, "open", None)
        if spec.keyed and callable(opener):
            try:
                opener(self._runtime)
            except EtherealKafkaError:
                raise
            except Exception as exc:
                raise user_error(spec.label, exc, "in open()") from exc
        self._runtime.seal()

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        spec = self.spec
        ordered = sorted((row.asDict(recursive=True) for row in rows), key=connected_order)
        raw = self._state.get()
        stored = loads(raw[0]) if raw is not None else {}
        states = {name: dict(stored.get(name, {})) for name in spec.states}
        self._scope.begin(int(timerValues.getCurrentProcessingTimeInMs()))
        call = _Call(int(key[0]), int(timerValues.getCurrentWatermarkInMs()), states)
        self._call = call
        context = _Context(self, call)
        function = spec.function
        for row in ordered:
            call.row = row
            if row.get(INPUT) == 2:
                call.key, call.writable = None, True
                kept = len(call.rows)
                self._run(function.process_broadcast_element, dict(row.get(SECOND) or {}), context)
                if call.bucket != 0:
                    del call.rows[kept:]  # emitted once: by bucket 0
            else:
                call.key, call.writable = row.get(USER_KEY), False
                if spec.keyed:
                    self._enter(call.key)
                self._run(function.process_element, dict(row.get(FIRST) or {}), context)
        if call.changed or raw is None:
            self._state.update((dumps(states),))
        self._call = None
        return iter([self._row(*values) for values in call.rows])

    def close(self) -> None:
        pass

    # -- helpers -------------------------------------------------------------------------------------------------
    def _enter(self, raw_key: Any) -> None:
        """Make `raw_key` the current key of keyed state, and remember it for `apply_to_keyed_state`."""
        assert self._keys is not None
        self._space.enter(raw_key)
        at = (dumps(raw_key),)
        if not self._keys.containsKey(at):
            self._keys.updateValue(at, (b"",))

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
        for raw in sorted(k[0] for k, _ in self._keys.iterator()):
            user = loads(raw)
            self._space.enter(user)
            function(user_key(user, spec.key_fields), state)

    def origin(self) -> str:
        """Where the current element came from (for messages)."""
        call = self._call
        row = call.row if call is not None else {}
        where = describe_origin(self.spec.topics, row.get(PART), row.get(OFFSET))
        return f"broadcast element from {where}" if row.get(INPUT) == 2 else where

    def _run(self, method: Any, element: dict[str, Any], context: _Context) -> None:
        spec = self.spec
        call = self._call
        assert call is not None
        layout = spec.layout
        try:
            for value in _outputs(method(element, context)):
                out = as_element(value, spec.label)
                try:
                    call.rows.append(layout.main(out, call.row.get(TS), call.key))
                except Mismatch as bad:
                    raise layout.type_of(None).error(bad, self.origin(), out, spec.label) from None
        except EtherealKafkaError:
            raise
        except Exception as exc:
            raise user_error(spec.label, exc, f"element from {self.origin()}") from exc


def _outputs(produced: Iterable[Any] | dict[str, Any] | None) -> Iterable[Any]:
    if produced is None:
        return ()
    return (produced,) if isinstance(produced, dict) else produced
