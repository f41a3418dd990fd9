"""`DataStream.name()` and `.uid()` (Flink's): how messages, the description and the graph name an operator."""

from __future__ import annotations

import pytest

from ethereal_kafka.api import GraphError, StreamExecutionEnvironment
from ethereal_kafka.api.graph import OperatorRef
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.plan.describe import describe_graph
from ethereal_kafka.plan.sink_groups import group_sinks


def _double(e: dict[str, int]) -> dict[str, int]:
    return {"n": e["n"] * 2}


def test_names_and_uids_label_operators_and_default_to_the_graph_position() -> None:
    env = StreamExecutionEnvironment()
    parsed = env.from_source("events").map(_double)
    kept = parsed.filter(lambda e: e["n"] > 2)  # added before the map is named: the name still applies
    parsed.name("double").uid("double-1")
    kept.uid("keep-big").sink_to("out")
    nodes = env.graph().nodes
    assert [n.label for n in nodes] == [
        "source#0",
        "'double' (uid double-1)",
        "map#2 (uid keep-big)",
        "sink#3",
    ]
    assert nodes[2].inputs[0] is nodes[1], "the rebuilt graph keeps its edges"
    assert nodes[1].ref == OperatorRef("map#1", "double", "double-1")
    assert (nodes[2].ref.display, nodes[2].ref.uid) == ("map#2", "keep-big")
    assert (nodes[0].ref.display, nodes[0].ref.uid) == ("source#0", "source#0")
    assert str(OperatorRef("process#3", "detect-fraud")) == "'detect-fraud' (process#3)"


def test_a_uid_is_unique_in_a_job_and_well_formed() -> None:
    env = StreamExecutionEnvironment()
    first = env.from_source("events").map(_double).uid("fraud-1")
    with pytest.raises(
        GraphError, match=r"^uid 'fraud-1' is given to two operators, map#1 and map#2: uids must "
    ):
        first.filter(lambda e: True).uid("fraud-1")
    first.uid("fraud-1")  # the same operator again is fine
    for bad in ("", "has space", "x" * 121):
        with pytest.raises(GraphError, match="a uid is 1-120 letters"):
            first.uid(bad)
    for bad in ("", "two\nlines", "it's"):
        with pytest.raises(GraphError, match="a name is one line"):
            first.name(bad)


def test_keyed_streams_stay_keyed_and_set_uid_is_an_alias() -> None:
    env = StreamExecutionEnvironment()
    keyed = env.from_source("events").key_by("user").name("by user").set_uid("by-user")
    assert type(keyed).__name__ == "KeyedStream"
    keyed.sum("n").sink_to("out")
    assert env.graph().nodes[1].label == "'by user' (uid by-user)"


def test_the_description_shows_names_and_uids() -> None:
    env = StreamExecutionEnvironment()
    env.from_source("events").map(_double, output_type="n long").name("double").uid("d-1").key_by("n").sum(
        "n"
    ).sink_to("out")
    graph = env.graph()
    sources = {
        "events": KafkaSourceConfig.from_properties(
            {"name": "events", "bootstrap.servers": "b", "topics": "t"}
        )
    }
    sinks = {"out": KafkaSinkConfig.from_properties({"name": "out", "bootstrap.servers": "b", "topic": "o"})}
    plan = describe_graph(graph, group_sinks(graph, sources), sources, sinks, "exactly-once")
    by_auto = {n["auto"]: n for n in plan["nodes"] if n["auto"]}
    assert {k: (n["label"], n["name"], n["uid"], n["stateful"]) for k, n in by_auto.items()} == {
        "map#1": ("double", "double", "d-1", False),
        "keyby#2": ("key_by n", "keyby#2", "keyby#2", False),
        "rolling#3": ("rolling sum n", "rolling#3", "rolling#3", True),
    }
    assert by_auto["map#1"]["description"] == "map _double"
    assert next(n for n in plan["nodes"] if n["id"] == "source:events")["uid"] is None
