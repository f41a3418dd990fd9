"""Keyed state of many user keys inside one Spark grouping key: the handle the broadcast operator gives its
`KeyedRuntimeContext` (`plan.operators.keyed_state`), so a broadcast process function's keyed state is the same
`api.state` objects, with the same cells and TTL, as a process function's.

The broadcast operator groups rows by *bucket* (a hash of the user key), so that each of its Spark calls sees the
broadcast elements and its keys' elements together. A `NamespacedHandle` stores every state variable of the
function as one Spark MapState of the bucket whose map key starts with the current user key (`Namespace.key`,
pickled): a value or aggregating state at `(key, b"")`, a list as one pickled list of cells at `(key, b"")`, a map
entry at `(key, map key)`. Spark versions the MapState with the checkpoint, as any state.

Iterating a key's map (`iterator`) or clearing it reads the bucket's whole variable: keep maps per key small.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ethereal_kafka.plan.operators.keyed_state import dumps, loads

#: Schema of a namespaced map key: the pickled user key, then the pickled map key (empty for values and lists).
NS_KEY = "n binary, k binary"
_EMPTY = b""


class Namespace:
    """The user key the operator is processing (pickled), shared by every state object of the function."""

    def __init__(self) -> None:
        self.key: bytes = dumps(None)

    def enter(self, key: Any) -> None:
        """Route state access to `key`'s state from now on."""
        self.key = dumps(key)


class _Value:
    """Spark's ValueState interface over a namespaced MapState."""

    def __init__(self, spark_map: Any, space: Namespace) -> None:
        self._map, self._space = spark_map, space

    def _at(self) -> tuple[bytes, bytes]:
        return (self._space.key, _EMPTY)

    def exists(self) -> bool:
        return bool(self._map.containsKey(self._at()))

    def get(self) -> tuple[Any, ...] | None:
        at = self._at()
        return tuple(self._map.getValue(at)) if self._map.containsKey(at) else None

    def update(self, value: tuple[Any, ...]) -> None:
        self._map.updateValue(self._at(), value)

    def clear(self) -> None:
        at = self._at()
        if self._map.containsKey(at):
            self._map.removeKey(at)


class _List:
    """Spark's ListState interface (rows of one binary cell) over a namespaced MapState holding a pickled list."""

    def __init__(self, spark_map: Any, space: Namespace) -> None:
        self._value = _Value(spark_map, space)

    def _rows(self) -> list[tuple[Any, ...]]:
        raw = self._value.get()
        return [tuple(r) for r in loads(raw[0])] if raw is not None else []

    def exists(self) -> bool:
        return self._value.exists()

    def get(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows())

    def put(self, rows: list[tuple[Any, ...]]) -> None:
        self._value.update((dumps([tuple(r) for r in rows]),))

    def appendValue(self, row: tuple[Any, ...]) -> None:
        self.put([*self._rows(), row])

    def appendList(self, rows: list[tuple[Any, ...]]) -> None:
        self.put([*self._rows(), *rows])

    def clear(self) -> None:
        self._value.clear()


class _Map:
    """Spark's MapState interface (one binary key column) over a namespaced MapState."""

    def __init__(self, spark_map: Any, space: Namespace) -> None:
        self._map, self._space = spark_map, space

    def _at(self, key: tuple[Any, ...]) -> tuple[bytes, bytes]:
        return (self._space.key, key[0])

    def _mine(self) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        if not self._map.exists():
            return []
        return [(k, v) for k, v in self._map.iterator() if k[0] == self._space.key]

    def exists(self) -> bool:
        return bool(self._mine())

    def containsKey(self, key: tuple[Any, ...]) -> bool:
        return bool(self._map.containsKey(self._at(key)))

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        at = self._at(key)
        return tuple(self._map.getValue(at)) if self._map.containsKey(at) else None

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self._map.updateValue(self._at(key), value)

    def removeKey(self, key: tuple[Any, ...]) -> None:
        at = self._at(key)
        if self._map.containsKey(at):
            self._map.removeKey(at)

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        return iter([((k[1],), tuple(v)) for k, v in self._mine()])

    def clear(self) -> None:
        for k, _ in self._mine():
            self._map.removeKey(tuple(k))


class NamespacedHandle:
    """The parts of Spark's `StatefulProcessorHandle` that `KeyedRuntimeContext` uses, namespaced by `space`."""

    def __init__(self, handle: Any, space: Namespace) -> None:
        self._handle, self._space = handle, space

    def _variable(self, name: str, value_schema: str) -> Any:
        return self._handle.getMapState(name, NS_KEY, value_schema)

    def getValueState(self, name: str, schema: str) -> _Value:
        """A per-key value."""
        return _Value(self._variable(name, schema), self._space)

    def getListState(self, name: str, schema: str) -> _List:
        """A per-key list (stored whole)."""
        return _List(self._variable(name, "v binary"), self._space)

    def getMapState(self, name: str, key_schema: str, value_schema: str) -> _Map:
        """A per-key map."""
        return _Map(self._variable(name, value_schema), self._space)
