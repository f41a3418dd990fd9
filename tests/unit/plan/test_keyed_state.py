"""Keyed state with TTL (`plan.operators.keyed_state`): expiry in processing time, lazy cleanup, sweeps."""

from __future__ import annotations

import pytest

from ethereal_kafka.api.functions import AggregateFunction
from ethereal_kafka.api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from ethereal_kafka.api.time import Duration
from ethereal_kafka.plan.errors import UserFunctionError
from ethereal_kafka.plan.operators.keyed_state import (
    KeyedRuntimeContext,
    KeyedStateError,
    Scope,
    Ttl,
    is_live,
)
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore


def _context(key: str = "a") -> tuple[KeyedRuntimeContext, Scope, FakeStore]:
    store = FakeStore(key=key)
    scope = Scope()
    return KeyedRuntimeContext(FakeHandle(store), scope, "process#1"), scope, store


def _ttl(ms: int, on_read: bool = False) -> StateTtlConfig:
    return StateTtlConfig(Duration(ms), "on_read_and_write" if on_read else "on_create_and_write")


def test_a_cell_lives_until_its_expiry_exclusive() -> None:
    assert is_live((None, 1), 10**15)
    assert is_live((150, 1), 149)
    assert not is_live((150, 1), 150)
    assert Ttl.of(None) is None
    assert Ttl.of(_ttl(5, on_read=True)) == Ttl(5, True)


def test_value_state_expires_in_processing_time_and_is_deleted_on_read() -> None:
    ctx, scope, store = _context()
    state = ctx.get_state(ValueStateDescriptor("v", _ttl(50)))
    scope.begin(100)
    state.update("x")
    assert scope.earliest == 150
    scope.begin(149)
    assert state.value() == "x"
    assert store.values  # a read does not refresh without on_read_and_write
    scope.begin(150)
    assert state.value() is None
    assert ("u_v", "a") not in store.values, "an expired value is deleted when read"


def test_on_read_and_write_restarts_the_clock_once_per_epoch() -> None:
    ctx, scope, _ = _context()
    state = ctx.get_state(ValueStateDescriptor("v", _ttl(50, on_read=True)))
    scope.begin(100)
    state.update(1)
    scope.begin(140)
    assert state.value() == 1
    assert scope.earliest == 190
    scope.begin(185)
    assert state.value() == 1
    scope.begin(235)
    assert state.value() is None


def test_update_none_clears_and_values_without_ttl_never_expire() -> None:
    ctx, scope, store = _context()
    state = ctx.get_state(ValueStateDescriptor("v"))
    scope.begin(1)
    state.update({"n": 1})
    assert scope.earliest is None
    scope.begin(10**13)
    assert state.value() == {"n": 1}
    state.update(None)
    assert not store.values


def test_list_elements_expire_one_by_one() -> None:
    ctx, scope, store = _context()
    state = ctx.get_list_state(ListStateDescriptor("l", _ttl(50)))
    scope.begin(100)
    state.add("a")
    scope.begin(120)
    state.add_all(["b", "c"])
    assert state.get() == ["a", "b", "c"]
    scope.begin(155)
    assert state.get() == ["b", "c"]
    assert len(store.lists[("u_l", "a")]) == 2, "expired elements are removed when read"
    scope.begin(170)
    assert state.get() == []
    assert ("u_l", "a") not in store.lists
    state.update(["z"])
    assert state.get() == ["z"]
    state.update([])
    assert state.get() == []


def test_list_on_read_and_write_refreshes_every_element() -> None:
    ctx, scope, _ = _context()
    state = ctx.get_list_state(ListStateDescriptor("l", _ttl(50, on_read=True)))
    scope.begin(100)
    state.add("a")
    scope.begin(130)
    state.add("b")
    scope.begin(140)
    assert state.get() == ["a", "b"]
    scope.begin(185)
    assert state.get() == ["a", "b"]
    assert ctx.sweep() == 235


def test_map_entries_expire_one_by_one_and_iterate_in_pickled_key_order() -> None:
    ctx, scope, store = _context()
    state = ctx.get_map_state(MapStateDescriptor("m", _ttl(50)))
    scope.begin(100)
    state.put("b", 2)
    state.put("a", None)
    scope.begin(120)
    state.put("c", 3)
    assert state.contains("a") and state.get("a") is None
    assert list(state.keys()) == ["a", "b", "c"]
    scope.begin(160)
    assert not state.contains("a")
    assert list(state.items()) == [("c", 3)]
    assert len(store.maps[("u_m", "a")]) == 1
    state.remove("c")
    state.remove("missing")
    assert state.is_empty()


def test_aggregating_state_folds_and_expires_as_one_value() -> None:
    class Mean(AggregateFunction[tuple[int, int]]):
        def create_accumulator(self) -> tuple[int, int]:
            return (0, 0)

        def add(self, value: dict[str, int], accumulator: tuple[int, int]) -> tuple[int, int]:
            return accumulator[0] + value["x"], accumulator[1] + 1

        def get_result(self, accumulator: tuple[int, int]) -> float:
            return accumulator[0] / accumulator[1]

    ctx, scope, _ = _context()
    state = ctx.get_aggregating_state(AggregatingStateDescriptor("mean", Mean(), _ttl(50)))
    scope.begin(100)
    assert state.get() is None
    state.add({"x": 2})
    state.add({"x": 4})
    assert state.get() == 3
    scope.begin(150)
    assert state.get() is None
    state.add({"x": 10})
    assert state.get() == 10


def test_sweep_deletes_every_expired_cell_and_reports_the_earliest_left() -> None:
    ctx, scope, store = _context()
    value = ctx.get_state(ValueStateDescriptor("v", _ttl(50)))
    items = ctx.get_list_state(ListStateDescriptor("l", _ttl(80)))
    table = ctx.get_map_state(MapStateDescriptor("m", _ttl(30)))
    ctx.get_state(ValueStateDescriptor("forever"))
    scope.begin(100)
    value.update(1)
    items.add(1)
    table.put("k", 1)
    scope.begin(140)
    table.put("j", 2)
    assert ctx.has_ttl
    scope.begin(150)
    assert ctx.sweep() == 170  # value (150) and map "k" (130) went; map "j" expires at 170, the list at 180
    assert ("u_v", "a") not in store.values
    scope.begin(200)
    assert ctx.sweep() is None
    assert not store.lists and not any(store.maps.values())


def test_state_is_declared_in_open_only_and_one_name_is_one_kind() -> None:
    ctx, _, store = _context()
    first = ctx.get_state(ValueStateDescriptor("n"))
    assert ctx.get_state(ValueStateDescriptor("n")) is first
    with pytest.raises(KeyedStateError, match="declared as ValueStateDescriptor and as ListStateDescriptor"):
        ctx.get_list_state(ListStateDescriptor("n"))
    ctx.seal()
    assert ctx.get_state(ValueStateDescriptor("n")) is first  # asking again is fine
    with pytest.raises(KeyedStateError, match="outside open"):
        ctx.get_map_state(MapStateDescriptor("late"))
    assert store.declared == [("value", "u_n")]


class _Opens:
    def __init__(self, fails: BaseException | None = None) -> None:
        self.fails = fails
        self.got: object = None

    def open(self, runtime_context: KeyedRuntimeContext) -> None:
        self.got = runtime_context.get_state(ValueStateDescriptor("seen"))
        if self.fails is not None:
            raise self.fails


def test_open_function_declares_state_then_seals_and_names_a_failure_in_open() -> None:
    ctx, _, _ = _context()
    function = _Opens()
    ctx.open_function(function)
    assert function.got is not None
    with pytest.raises(KeyedStateError, match="declared outside open"):
        ctx.get_state(ValueStateDescriptor("late"))
    # A function without open() is sealed all the same.
    bare, _, _ = _context()
    bare.open_function(object())
    with pytest.raises(KeyedStateError, match="declared outside open"):
        bare.get_state(ValueStateDescriptor("late"))
    # The user's exception is the function's, named with the operator; the framework's own passes as it is.
    failing, _, _ = _context()
    with pytest.raises(UserFunctionError, match=r"process#1.*in open\(\)") as caught:
        failing.open_function(_Opens(ValueError("no config")))
    assert isinstance(caught.value.__cause__, ValueError)
    framework, _, _ = _context()
    with pytest.raises(KeyedStateError, match="boom"):
        framework.open_function(_Opens(KeyedStateError("boom")))
