"""Connected streams in the graph: `connect` + `map`/`flat_map` become per-input maps and a union; keyed
`connect(...).process` becomes one co-process node reading both inputs; what cannot run is refused at once."""

from __future__ import annotations

from typing import Any

import pytest

from ethereal_kafka.api import (
    BroadcastConnectedStream,
    BroadcastStream,
    CoFlatMapFunction,
    CoMapFunction,
    GraphError,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    MapStateDescriptor,
    OutputTag,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from ethereal_kafka.api import graph as g


class Both(CoMapFunction):
    def map1(self, value: dict[str, Any]) -> dict[str, Any]:
        return {"x": 1}

    def map2(self, value: dict[str, Any]) -> dict[str, Any]:
        return {"x": 2}


class Split(CoFlatMapFunction):
    def flat_map1(self, value: dict[str, Any]) -> Any:
        yield value

    def flat_map2(self, value: dict[str, Any]) -> Any:
        return [value, value]


class Shared(KeyedCoProcessFunction):
    def process_element1(self, value: dict[str, Any], ctx: Any) -> Any:
        yield value

    def process_element2(self, value: dict[str, Any], ctx: Any) -> Any:
        yield value


def test_co_map_and_co_flat_map_are_a_map_per_input_then_a_union() -> None:
    env = StreamExecutionEnvironment()
    a, b = env.from_source("a"), env.from_source("b")
    merged = a.connect(b).map(Both(), output_type="x long")
    assert isinstance(merged.node, g.UnionNode)
    first, second = merged.node.inputs
    assert isinstance(first, g.MapNode) and isinstance(second, g.MapNode)
    assert first.inputs == (a.node,) and second.inputs == (b.node,)
    assert first.function({}) == {"x": 1} and second.function({}) == {"x": 2}
    flat = a.connect(b).flat_map(Split(), output_type="x long")
    kinds = {n.kind for n in flat.node.inputs if isinstance(n, g.MapNode)}
    assert kinds == {"flat_map"}


def test_keyed_connect_process_is_one_node_reading_both_inputs() -> None:
    env = StreamExecutionEnvironment()
    a, b = env.from_source("a").key_by("user"), env.from_source("b").key_by("account")
    tag = OutputTag("odd", "x long")
    out = a.connect(b).process(Shared(), output_type="x long", side_outputs=[tag])
    node = out.node
    assert isinstance(node, g.CoProcessNode) and isinstance(node, g.ProcessNode)
    assert node.inputs == (a.node, b.node) and node.side_outputs == (tag,)
    assert node.ref.auto == f"coprocess#{node.id}"
    keyed_later = env.from_source("a").connect(env.from_source("b")).key_by("user", "account")
    assert isinstance(keyed_later.process(Shared(), output_type="x long").node, g.CoProcessNode)


def test_unkeyed_connect_process_is_a_co_process_node_that_is_not_keyed() -> None:
    env = StreamExecutionEnvironment()
    a, b = env.from_source("a"), env.from_source("b")
    node = a.connect(b).process(Shared(), output_type="x long").node
    assert isinstance(node, g.CoProcessNode) and not node.keyed and node.inputs == (a.node, b.node)
    assert a.key_by("u").connect(b.key_by("u")).process(Shared(), output_type="x long").node.keyed


def test_connected_process_refuses_half_keyed_inputs_wrong_functions_and_other_jobs() -> None:
    env = StreamExecutionEnvironment()
    a, b = env.from_source("a"), env.from_source("b")
    with pytest.raises(GraphError, match=r"needs both keyed .* or neither"):
        a.connect(b.key_by("user")).process(Shared())

    class Single(KeyedProcessFunction):
        def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
            yield value

    with pytest.raises(GraphError, match="takes a KeyedCoProcessFunction or a CoProcessFunction"):
        a.key_by("u").connect(b.key_by("u")).process(Single())
    with pytest.raises(GraphError, match="time_mode is auto, event or processing"):
        a.key_by("u").connect(b.key_by("u")).process(Shared(), time_mode="soon")
    with pytest.raises(GraphError, match="needs an output_type"):
        a.key_by("u").connect(b.key_by("u")).process(Shared(), side_outputs=[OutputTag("t")])
    with pytest.raises(GraphError, match="same job"):
        a.connect(StreamExecutionEnvironment().from_source("b"))
    with pytest.raises(GraphError, match="another stream"):
        a.connect("b")  # type: ignore[arg-type]


class Rules(KeyedBroadcastProcessFunction):
    def process_element(self, value: dict[str, Any], ctx: Any) -> Any:
        yield value

    def process_broadcast_element(self, value: dict[str, Any], ctx: Any) -> Any:
        return None


def test_broadcast_connect_is_one_node_reading_the_stream_and_the_broadcast() -> None:
    env = StreamExecutionEnvironment()
    rules_state = MapStateDescriptor("rules")
    broadcast = env.from_source("rules").broadcast(rules_state)
    assert isinstance(broadcast, BroadcastStream) and broadcast.node.descriptors == (rules_state,)
    keyed = env.from_source("events").key_by("user")
    out = keyed.connect(broadcast).process(Rules())
    node = out.node
    assert isinstance(node, g.BroadcastProcessNode) and node.keyed
    assert node.inputs == (keyed.node, broadcast.node)
    plain = env.from_source("events").connect(broadcast)
    assert isinstance(plain, BroadcastConnectedStream)
    assert not plain.process(Rules()).node.keyed  # type: ignore[attr-defined]


def test_broadcast_refuses_missing_or_wrong_descriptors_and_functions() -> None:
    env = StreamExecutionEnvironment()
    rules = env.from_source("rules")
    with pytest.raises(GraphError, match="needs at least one MapStateDescriptor"):
        rules.broadcast()
    with pytest.raises(GraphError, match="described by MapStateDescriptors"):
        rules.broadcast(ValueStateDescriptor("x"))  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="names repeat: a, a"):
        rules.broadcast(MapStateDescriptor("a"), MapStateDescriptor("a"))
    with pytest.raises(
        GraphError,
        match=r"takes a KeyedBroadcastProcessFunction or a BroadcastProcessFunction \(no process_element\)",
    ):
        env.from_source("e").key_by("u").connect(rules.broadcast(MapStateDescriptor("a"))).process(Shared())
    with pytest.raises(GraphError, match="same job"):
        StreamExecutionEnvironment().from_source("e").connect(rules.broadcast(MapStateDescriptor("a")))
