"""Keyed state of many user keys inside one Spark grouping key (the broadcast operator's buckets): every kind of
state, seen through `KeyedRuntimeContext`, keeps each key's values apart."""

from __future__ import annotations

from ethereal_kafka.api.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from ethereal_kafka.plan.operators.keyed_state import KeyedRuntimeContext, Scope
from ethereal_kafka.plan.operators.namespaced import Namespace, NamespacedHandle
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore


def test_value_list_and_map_state_are_kept_per_user_key_in_one_bucket() -> None:
    store = FakeStore(key=(0,))
    space = Namespace()
    runtime = KeyedRuntimeContext(NamespacedHandle(FakeHandle(store), space), Scope(), "broadcast#1")
    value = runtime.get_state(ValueStateDescriptor("v"))
    items = runtime.get_list_state(ListStateDescriptor("l"))
    entries = runtime.get_map_state(MapStateDescriptor("m"))
    runtime.seal()
    for key in ("a", "b"):
        space.enter(key)
        value.update(f"value of {key}")
        items.add(1)
        items.add_all([2, key])
        entries.put("x", key)
        entries.put(key, 1)
    space.enter("a")
    assert value.value() == "value of a" and items.get() == [1, 2, "a"]
    assert list(entries.items()) == [("a", 1), ("x", "a")]
    entries.clear()
    items.clear()
    value.clear()
    assert value.value() is None and items.get() == [] and list(entries.items()) == []
    space.enter("b")
    assert value.value() == "value of b" and items.get() == [1, 2, "b"]
    assert (
        sorted(entries.items()) == [("b", 1), ("x", "b")]
        and entries.contains("x")
        and not entries.contains("a")
    )
    assert {name for kind, name in store.declared} == {"u_v", "u_l", "u_m"}, "one Spark map per state"
