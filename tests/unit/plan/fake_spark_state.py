"""An in-memory stand-in for Spark's transformWithState state server: the handle a processor gets, and a driver
that calls a processor the way Spark does (per key with rows, then every due timer, deleting it after the call)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeStore:
    """Every key's state and timers; `key` is the implicit grouping key Spark would set."""

    key: Any = None
    values: dict[tuple[str, Any], tuple[Any, ...]] = field(default_factory=dict)
    lists: dict[tuple[str, Any], list[tuple[Any, ...]]] = field(default_factory=dict)
    maps: dict[tuple[str, Any], dict[tuple[Any, ...], tuple[Any, ...]]] = field(default_factory=dict)
    timers: dict[Any, set[int]] = field(default_factory=dict)
    declared: list[tuple[str, str]] = field(default_factory=list)


class _Value:
    def __init__(self, store: FakeStore, name: str) -> None:
        self.store, self.name = store, name

    def exists(self) -> bool:
        return (self.name, self.store.key) in self.store.values

    def get(self) -> tuple[Any, ...] | None:
        return self.store.values.get((self.name, self.store.key))

    def update(self, value: tuple[Any, ...]) -> None:
        self.store.values[(self.name, self.store.key)] = value

    def clear(self) -> None:
        self.store.values.pop((self.name, self.store.key), None)


class _List:
    def __init__(self, store: FakeStore, name: str) -> None:
        self.store, self.name = store, name

    def _slot(self) -> tuple[str, Any]:
        return (self.name, self.store.key)

    def exists(self) -> bool:
        return bool(self.store.lists.get(self._slot()))

    def get(self) -> Iterator[tuple[Any, ...]]:
        return iter(list(self.store.lists.get(self._slot(), [])))

    def put(self, rows: list[tuple[Any, ...]]) -> None:
        self.store.lists[self._slot()] = list(rows)

    def appendValue(self, row: tuple[Any, ...]) -> None:
        self.store.lists.setdefault(self._slot(), []).append(row)

    def appendList(self, rows: list[tuple[Any, ...]]) -> None:
        self.store.lists.setdefault(self._slot(), []).extend(rows)

    def clear(self) -> None:
        self.store.lists.pop(self._slot(), None)


class _Map:
    def __init__(self, store: FakeStore, name: str) -> None:
        self.store, self.name = store, name

    def _map(self) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        return self.store.maps.setdefault((self.name, self.store.key), {})

    def exists(self) -> bool:
        return bool(self._map())

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self._map().get(key)

    def containsKey(self, key: tuple[Any, ...]) -> bool:
        return key in self._map()

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self._map()[key] = value

    def removeKey(self, key: tuple[Any, ...]) -> None:
        del self._map()[key]  # Spark's removeKey of an absent key would not fail; this one does, to catch it

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        return iter(list(self._map().items()))

    def clear(self) -> None:
        self.store.maps.pop((self.name, self.store.key), None)


class FakeHandle:
    """`StatefulProcessorHandle` over a `FakeStore`."""

    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def getValueState(self, name: str, schema: str, ttl: int | None = None) -> _Value:
        assert ttl is None, "the framework keeps TTL itself"
        self.store.declared.append(("value", name))
        return _Value(self.store, name)

    def getListState(self, name: str, schema: str, ttl: int | None = None) -> _List:
        self.store.declared.append(("list", name))
        return _List(self.store, name)

    def getMapState(self, name: str, key_schema: str, value_schema: str, ttl: int | None = None) -> _Map:
        self.store.declared.append(("map", name))
        return _Map(self.store, name)

    def registerTimer(self, ts: int) -> None:
        self.store.timers.setdefault(self.store.key, set()).add(ts)

    def deleteTimer(self, ts: int) -> None:
        self.store.timers.get(self.store.key, set()).discard(ts)

    def listTimers(self) -> Iterator[int]:
        return iter(sorted(self.store.timers.get(self.store.key, set())))


@dataclass(frozen=True)
class TimerValues:
    watermark: int
    now: int

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark

    def getCurrentProcessingTimeInMs(self) -> int:
        return self.now


@dataclass(frozen=True)
class Expired:
    ts: int

    def getExpiryTimeInMs(self) -> int:
        return self.ts


def run_epoch(
    processor: Any,
    store: FakeStore,
    rows: Iterable[Any],
    watermark: int,
    now: int,
    event_mode: bool = True,
) -> list[dict[str, Any]]:
    """Call `processor` as Spark calls it for one epoch; its output rows as dicts, in order."""
    by_key: dict[Any, list[Any]] = {}
    for row in rows:
        by_key.setdefault(row["__key"], []).append(row)
    values = TimerValues(watermark, now)
    out: list[dict[str, Any]] = []
    for key, group in by_key.items():
        store.key = key
        out += [r.asDict(recursive=True) for r in processor.handleInputRows((key,), iter(group), values)]
    threshold = watermark if event_mode else now
    expired = sorted((ts, k) for k, timers in store.timers.items() for ts in timers if ts <= threshold)
    for ts, key in expired:
        store.key = key
        out += [r.asDict(recursive=True) for r in processor.handleExpiredTimer((key,), values, Expired(ts))]
        store.timers[key].discard(ts)
    return out
