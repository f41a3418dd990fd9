"""Keyed state of process functions: the `api.state` interfaces on Spark's state store, with time-to-live.

Storage: every state a function declares in `open()` is one state variable of the operator's transformWithState,
named `u_<name>` (the operator's own bookkeeping uses names starting with `_ek_`):

- `ValueState`, `AggregatingState` → a Spark ValueState holding one pickled *cell*;
- `ListState` → a Spark ListState of pickled cells (one per element, so `add` appends without rewriting the list);
- `MapState` → a Spark MapState from pickled keys to pickled cells.

A cell is `(expires_at, value)`, `expires_at` None without TTL. Spark versions the store with the checkpoint, so a
replayed epoch reads the state of the epoch before it.

TTL (`StateTtlConfig`): time is the epoch's processing time P, the batch timestamp Spark logged for the epoch (a
replay sees the same P, so it expires the same values). A write at P sets `expires_at = P + ttl` — per list element
and per map entry, as in Flink; with `on_read_and_write` a read that finds a live value sets it too (written back at
most once per epoch). A cell is expired when `P >= expires_at`: reads treat it as absent and delete it on the spot
(lazy cleanup). Keys that are never touched again are cleaned by the operator's cleanup timer, armed from the
earliest expiry a key's writes reported (`Scope.earliest`) and swept by `KeyedRuntimeContext.sweep`
(`plan.operators.process` says when it fires). Spark's native TTL is not used: it exists only in ProcessingTime
mode and only restarts on writes; one implementation keeps both time modes identical.

Map keys are compared by their pickled bytes: use plain values (str, int, tuples of them), not floats that may
also be ints or dicts whose order varies. `items()` is ordered by those bytes, so it is deterministic.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ethereal_kafka.api.functions import RuntimeContext
from ethereal_kafka.api.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    StateTtlConfig,
    ValueState,
    ValueStateDescriptor,
)
from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.plan.errors import user_error

#: Spark schema of a cell and of a map key.
CELL = "v binary"
MAP_KEY = "k binary"
#: Prefix of user state variables (internal ones start with `_ek_`).
USER_PREFIX = "u_"

Cell = tuple[int | None, Any]


class KeyedStateError(EtherealKafkaError):
    """A process function used keyed state or timers in a way the operator cannot honour.

    Raised inside the Spark task (the query fails and the epoch is not committed): state declared outside `open()`,
    one name declared as two kinds of state, a processing-time timer in event-time mode, an event-time timer on a
    stream without event time, or `on_timer` registering due timers without end. Fix the function or its
    `time_mode`, then restart: the epoch is replayed.
    """


def dumps(value: Any) -> bytes:
    """Pickle `value` (protocol 5; equal plain values give equal bytes)."""
    return pickle.dumps(value, protocol=5)


def loads(raw: bytes) -> Any:
    """Unpickle what `dumps` made."""
    return pickle.loads(raw)


@dataclass(frozen=True)
class Ttl:
    """A state's time-to-live, in milliseconds of processing time.

    Attributes:
        millis: How long a cell lives after it was written (or read, with `refresh_on_read`).
        refresh_on_read: `on_read_and_write`.
    """

    millis: int
    refresh_on_read: bool = False

    @classmethod
    def of(cls, config: StateTtlConfig | None) -> Ttl | None:
        """The TTL of a descriptor's config (None: the state never expires)."""
        if config is None:
            return None
        return cls(config.ttl.millis, config.update_type == "on_read_and_write")


def is_live(cell: Cell, now: int) -> bool:
    """True when `cell` has not expired at processing time `now` (expired: `now >= expires_at`)."""
    return cell[0] is None or now < cell[0]


class Scope:
    """The clock of the current call of the operator, shared by every state object of the function.

    The operator sets `now` before each call (the epoch's batch timestamp) and reads `earliest` after it: the
    earliest expiry any TTL write of the call produced, from which it arms the key's cleanup timer.
    """

    def __init__(self) -> None:
        self.now = 0
        self.earliest: int | None = None

    def begin(self, now: int) -> None:
        """Start a call at processing time `now`."""
        self.now = now
        self.earliest = None

    def note(self, expires_at: int | None) -> None:
        """Record that a cell expiring at `expires_at` was written (None: nothing to record)."""
        if expires_at is not None and (self.earliest is None or expires_at < self.earliest):
            self.earliest = expires_at


class _Cells:
    """What every state kind shares: making and reading cells under a TTL."""

    def __init__(self, scope: Scope, ttl: Ttl | None) -> None:
        self._scope = scope
        self._ttl = ttl

    def _cell(self, value: Any) -> bytes:
        expires = self._scope.now + self._ttl.millis if self._ttl is not None else None
        self._scope.note(expires)
        return dumps((expires, value))

    def _read(self, raw: bytes) -> Cell:
        cell = loads(raw)
        return (cell[0], cell[1])

    def _live(self, cell: Cell) -> bool:
        return is_live(cell, self._scope.now)

    def _stale(self, cell: Cell) -> bool:
        """True when a read must write `cell` back to restart its TTL (`on_read_and_write`, once per epoch)."""
        ttl = self._ttl
        return ttl is not None and ttl.refresh_on_read and cell[0] != self._scope.now + ttl.millis

    @property
    def has_ttl(self) -> bool:
        """True when the state expires."""
        return self._ttl is not None


class KeyedValueState(_Cells, ValueState):
    """`ValueState` on a Spark ValueState of one cell (an update of None clears, as in Flink)."""

    def __init__(self, spark_state: Any, scope: Scope, ttl: Ttl | None) -> None:
        super().__init__(scope, ttl)
        self._state = spark_state

    def _get_cell(self) -> Cell | None:
        raw = self._state.get()
        if raw is None:
            return None
        cell = self._read(raw[0])
        if not self._live(cell):
            self._state.clear()
            return None
        return cell

    def value(self) -> Any:
        cell = self._get_cell()
        if cell is None:
            return None
        if self._stale(cell):
            self._state.update((self._cell(cell[1]),))
        return cell[1]

    def update(self, value: Any) -> None:
        if value is None:
            self._state.clear()
        else:
            self._state.update((self._cell(value),))

    def clear(self) -> None:
        self._state.clear()

    def sweep(self) -> int | None:
        """Delete the cell if expired; the expiry of what remains."""
        cell = self._get_cell()
        return cell[0] if cell is not None else None


class KeyedAggregatingState(KeyedValueState, AggregatingState):
    """`AggregatingState`: one accumulator cell folded with the descriptor's `AggregateFunction`."""

    def __init__(self, spark_state: Any, scope: Scope, ttl: Ttl | None, function: Any) -> None:
        super().__init__(spark_state, scope, ttl)
        self._function = function

    def get(self) -> Any:
        accumulator = KeyedValueState.value(self)
        return None if accumulator is None else self._function.get_result(accumulator)

    def add(self, value: Any) -> None:
        cell = self._get_cell()
        accumulator = self._function.create_accumulator() if cell is None else cell[1]
        KeyedValueState.update(self, self._function.add(value, accumulator))


class KeyedListState(_Cells, ListState):
    """`ListState` on a Spark ListState of cells (one per element)."""

    def __init__(self, spark_state: Any, scope: Scope, ttl: Ttl | None) -> None:
        super().__init__(scope, ttl)
        self._state = spark_state

    def _cells(self) -> list[Cell]:
        if not self._state.exists():
            return []
        cells = [self._read(row[0]) for row in self._state.get()]
        live = [c for c in cells if self._live(c)]
        refresh = any(self._stale(c) for c in live)
        if refresh:
            assert self._ttl is not None
            live = [(self._scope.now + self._ttl.millis, c[1]) for c in live]
        if refresh or len(live) != len(cells):
            self._store(live)
        return live

    def _store(self, cells: list[Cell]) -> None:
        """Replace the list with `cells` as they are (each keeps its expiry)."""
        if not cells:
            self._state.clear()
            return
        for cell in cells:
            self._scope.note(cell[0])
        self._state.put([(dumps(c),) for c in cells])

    def _put(self, values: list[Any]) -> None:
        if values:
            self._state.put([(self._cell(v),) for v in values])
        else:
            self._state.clear()

    def get(self) -> list[Any]:
        return [c[1] for c in self._cells()]

    def add(self, value: Any) -> None:
        self._state.appendValue((self._cell(value),))

    def add_all(self, values: Iterable[Any]) -> None:
        cells = [(self._cell(v),) for v in values]
        if cells:
            self._state.appendList(cells)

    def update(self, values: Iterable[Any]) -> None:
        self._put(list(values))

    def clear(self) -> None:
        self._state.clear()

    def sweep(self) -> int | None:
        """Delete the expired elements; the earliest expiry of what remains."""
        return min((c[0] for c in self._cells() if c[0] is not None), default=None)


class KeyedMapState(_Cells, MapState):
    """`MapState` on a Spark MapState from pickled keys to cells."""

    def __init__(self, spark_state: Any, scope: Scope, ttl: Ttl | None) -> None:
        super().__init__(scope, ttl)
        self._state = spark_state

    def _get_cell(self, raw_key: tuple[bytes]) -> Cell | None:
        raw = self._state.getValue(raw_key)
        if raw is None:
            return None
        cell = self._read(raw[0])
        if not self._live(cell):
            self._state.removeKey(raw_key)
            return None
        if self._stale(cell):
            self._state.updateValue(raw_key, (self._cell(cell[1]),))
        return cell

    def get(self, key: Any) -> Any:
        cell = self._get_cell((dumps(key),))
        return None if cell is None else cell[1]

    def put(self, key: Any, value: Any) -> None:
        self._state.updateValue((dumps(key),), (self._cell(value),))

    def contains(self, key: Any) -> bool:
        return self._get_cell((dumps(key),)) is not None

    def remove(self, key: Any) -> None:
        raw_key = (dumps(key),)
        if self._state.containsKey(raw_key):
            self._state.removeKey(raw_key)

    def _entries(self) -> list[tuple[bytes, Cell]]:
        if not self._state.exists():
            return []
        entries = sorted(((k[0], self._read(v[0])) for k, v in self._state.iterator()), key=lambda e: e[0])
        live = []
        for raw_key, cell in entries:
            if not self._live(cell):
                self._state.removeKey((raw_key,))
                continue
            if self._stale(cell):
                self._state.updateValue((raw_key,), (self._cell(cell[1]),))
            live.append((raw_key, cell))
        return live

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter([(loads(raw_key), cell[1]) for raw_key, cell in self._entries()])

    def clear(self) -> None:
        self._state.clear()

    def sweep(self) -> int | None:
        """Delete the expired entries; the earliest expiry of what remains."""
        return min((c[0] for _, c in self._entries() if c[0] is not None), default=None)


_Sweepable = KeyedValueState | KeyedListState | KeyedMapState


class KeyedRuntimeContext(RuntimeContext):
    """The `RuntimeContext` a process function's `open()` gets: declares its state on the operator's handle.

    Called by the operator's `init(handle)` — on the driver (Spark collects the state schemas) and in every task —
    before any element. State must be declared during `open()`: Spark creates state variables only there.

    Args:
        handle: Spark's `StatefulProcessorHandle`.
        scope: The operator's clock (shared with every state object).
        label: The operator's name for messages.
    """

    def __init__(self, handle: Any, scope: Scope, label: str) -> None:
        self._handle = handle
        self._scope = scope
        self._label = label
        self._declared: dict[str, tuple[type, Any]] = {}
        self._sealed = False

    def seal(self) -> None:
        """End of `open()`: later declarations raise `KeyedStateError`."""
        self._sealed = True

    def open_function(self, function: object) -> None:
        """Call the user function's `open(self)` when it has one, then seal: a failure in it is the function's
        (`UserFunctionError` naming the operator and "in open()"), a framework error passes as it is."""
        opener = getattr(function, "open", None)
        if callable(opener):
            try:
                opener(self)
            except EtherealKafkaError:
                raise
            except Exception as exc:
                raise user_error(self._label, exc, "in open()") from exc
        self.seal()

    def _declare(self, kind: type, name: str, make: Callable[[str], Any]) -> Any:
        if not isinstance(name, str) or not name:
            raise KeyedStateError(f"{self._label}: a state name is a non-empty string, got {name!r}")
        found = self._declared.get(name)
        if found is not None:
            if found[0] is not kind:
                raise KeyedStateError(
                    f"{self._label}: state {name!r} is declared as {found[0].__name__} and as {kind.__name__}"
                )
            return found[1]
        if self._sealed:
            raise KeyedStateError(
                f"{self._label}: state {name!r} is declared outside open(); declare every state in "
                "open(runtime_context) (Spark creates state variables only there)"
            )
        state = make(USER_PREFIX + name)
        self._declared[name] = (kind, state)
        return state

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        ttl = Ttl.of(descriptor.ttl)
        return self._declare(
            ValueStateDescriptor,
            descriptor.name,
            lambda n: KeyedValueState(self._handle.getValueState(n, CELL), self._scope, ttl),
        )

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        ttl = Ttl.of(descriptor.ttl)
        return self._declare(
            ListStateDescriptor,
            descriptor.name,
            lambda n: KeyedListState(self._handle.getListState(n, CELL), self._scope, ttl),
        )

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        ttl = Ttl.of(descriptor.ttl)
        return self._declare(
            MapStateDescriptor,
            descriptor.name,
            lambda n: KeyedMapState(self._handle.getMapState(n, MAP_KEY, CELL), self._scope, ttl),
        )

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        ttl = Ttl.of(descriptor.ttl)
        function = descriptor.aggregate_function
        return self._declare(
            AggregatingStateDescriptor,
            descriptor.name,
            lambda n: KeyedAggregatingState(self._handle.getValueState(n, CELL), self._scope, ttl, function),
        )

    def declared(self, name: str) -> Any:
        """The state object declared in `open()` under `name`, or None."""
        found = self._declared.get(name)
        return found[1] if found is not None else None

    @property
    def has_ttl(self) -> bool:
        """True when some declared state expires."""
        return any(self._expiring())

    def _expiring(self) -> Iterator[_Sweepable]:
        for _, state in self._declared.values():
            if isinstance(state, _Sweepable) and state.has_ttl:
                yield state

    def sweep(self) -> int | None:
        """Delete every expired cell of the current key (called by the cleanup timer); the earliest expiry of the
        cells that remain, or None when none expires."""
        remaining = [state.sweep() for state in self._expiring()]
        return min((r for r in remaining if r is not None), default=None)
