"""`plan.state_inventory.declared_state`: the state a process function declares in `open()`, found without Spark."""

from __future__ import annotations

from typing import Any

from ethereal_kafka.api import (
    AggregatingStateDescriptor,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    RuntimeContext,
    ValueStateDescriptor,
)
from ethereal_kafka.plan.state_inventory import declared_state


class _Counts(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent"))
        self.buckets = runtime_context.get_map_state(MapStateDescriptor("buckets"))
        self.mean = runtime_context.get_aggregating_state(AggregatingStateDescriptor("mean", None))  # type: ignore[arg-type]
        self.total.clear()  # a state object used in open() does nothing here

    def process_element(self, value: Any, ctx: Any) -> None:
        return None


class _Broken(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        raise RuntimeError("needs the task's resources")

    def process_element(self, value: Any, ctx: Any) -> None:
        return None


def test_the_declared_variables_and_their_kinds_without_touching_the_function() -> None:
    function = _Counts()
    assert declared_state(function) == {
        "u_total": "ValueState",
        "u_recent": "ListState",
        "u_buckets": "MapState",
        "u_mean": "ValueState",
    }
    assert not hasattr(function, "total"), "open() ran on the function itself: it would be pickled with it"
    assert declared_state(_Broken()) is None
    assert declared_state(lambda e: e) is None
