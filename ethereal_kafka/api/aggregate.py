"""`AggregateFunction`, the incremental aggregation interface windows and aggregating state share, and `Element`,
what user functions receive. A module of its own because `api.state` refers to it and `api.functions` (which
re-exports both) refers to the state interfaces.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

#: An element: field name to value (see `api.functions`).
Element = dict[str, Any]
ACC = TypeVar("ACC")


class AggregateFunction(ABC, Generic[ACC]):
    """Incremental aggregation with an accumulator (Flink's AggregateFunction).

    The accumulator may be any picklable Python value; it is kept in Spark's state store between epochs (so it is
    versioned with the checkpoint and restored on replay).
    """

    @abstractmethod
    def create_accumulator(self) -> ACC:
        """A fresh accumulator (called for each new key/window)."""

    @abstractmethod
    def add(self, value: Element, accumulator: ACC) -> ACC:
        """Add one element; may mutate and return `accumulator`."""

    @abstractmethod
    def get_result(self, accumulator: ACC) -> Any:
        """The result: a dict (its fields become the output's fields) or a single value (field `value`)."""

    def merge(self, a: ACC, b: ACC) -> ACC:
        """Merge two accumulators (session windows merge their windows' accumulators)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement merge (needed by session windows)"
        )
