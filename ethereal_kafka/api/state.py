"""Keyed state: descriptors (what the user declares) and the state interfaces a process function gets.

State lives in Spark's state store (RocksDB by default), versioned with the checkpoint: a replayed epoch reads the
state of the epoch before it. Values are any picklable Python values. With a `StateTtlConfig`, a value expires
`ttl` after it was last written (or read, per `update_type`), measured in the epochs' processing time (the batch
timestamps Spark logs, so a replay expires the same values); an expired value reads as absent and is removed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ethereal_kafka.api.time import Duration, as_duration

if TYPE_CHECKING:
    from ethereal_kafka.api.aggregate import AggregateFunction


@dataclass(frozen=True)
class StateTtlConfig:
    """Time-to-live of a state value.

    Attributes:
        ttl: How long a value lives.
        update_type: `on_create_and_write` (default) restarts the clock on each write; `on_read_and_write` also on
            each read.
    """

    ttl: Duration
    update_type: str = "on_create_and_write"

    @classmethod
    def new_builder(cls, ttl: Duration | int) -> StateTtlConfig:
        """A TTL config of `ttl` (Flink-style entry point)."""
        return cls(as_duration(ttl))

    def __post_init__(self) -> None:
        if self.update_type not in ("on_create_and_write", "on_read_and_write"):
            raise ValueError("update_type is on_create_and_write or on_read_and_write")


@dataclass(frozen=True)
class ValueStateDescriptor:
    """A single value per key, named `name` (unique within the function)."""

    name: str
    ttl: StateTtlConfig | None = None


@dataclass(frozen=True)
class ListStateDescriptor:
    """A list per key."""

    name: str
    ttl: StateTtlConfig | None = None


@dataclass(frozen=True)
class MapStateDescriptor:
    """A map per key (keys and values picklable; keys also hashable)."""

    name: str
    ttl: StateTtlConfig | None = None


@dataclass(frozen=True)
class AggregatingStateDescriptor:
    """An accumulator per key, folded with `aggregate_function`."""

    name: str
    aggregate_function: AggregateFunction[Any]
    ttl: StateTtlConfig | None = None


class ValueState(ABC):
    """One value per key."""

    @abstractmethod
    def value(self) -> Any:
        """The value, or None when absent (or expired)."""

    @abstractmethod
    def update(self, value: Any) -> None:
        """Replace the value."""

    @abstractmethod
    def clear(self) -> None:
        """Remove the value."""


class ListState(ABC):
    """A list per key."""

    @abstractmethod
    def get(self) -> list[Any]:
        """The elements (empty when none)."""

    @abstractmethod
    def add(self, value: Any) -> None:
        """Append one element."""

    @abstractmethod
    def add_all(self, values: Iterable[Any]) -> None:
        """Append elements."""

    @abstractmethod
    def update(self, values: Iterable[Any]) -> None:
        """Replace the list."""

    @abstractmethod
    def clear(self) -> None:
        """Remove every element."""


class MapState(ABC):
    """A map per key."""

    @abstractmethod
    def get(self, key: Any) -> Any:
        """The value of `key`, or None."""

    @abstractmethod
    def put(self, key: Any, value: Any) -> None:
        """Set `key` to `value`."""

    @abstractmethod
    def contains(self, key: Any) -> bool:
        """True if `key` has a value."""

    @abstractmethod
    def remove(self, key: Any) -> None:
        """Remove `key`."""

    @abstractmethod
    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every entry (in a deterministic order: sorted by the pickled key)."""

    def keys(self) -> Iterator[Any]:
        """Every key."""
        return (k for k, _ in self.items())

    def values(self) -> Iterator[Any]:
        """Every value."""
        return (v for _, v in self.items())

    def is_empty(self) -> bool:
        """True when the map has no entry."""
        return next(self.items(), None) is None

    @abstractmethod
    def clear(self) -> None:
        """Remove every entry."""


class AggregatingState(ABC):
    """An accumulator per key; `add` folds elements in, `get` returns the aggregate's result."""

    @abstractmethod
    def get(self) -> Any:
        """`get_result` of the accumulator, or None when nothing was added."""

    @abstractmethod
    def add(self, value: Any) -> None:
        """Fold one element in."""

    @abstractmethod
    def clear(self) -> None:
        """Forget the accumulator."""
