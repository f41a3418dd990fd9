"""The plan description: which operator of which query runs where (no Spark needed)."""

from __future__ import annotations

from typing import Any

from ethereal_kafka.api import (
    OutputTag,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.plan.describe import describe_dataframe, describe_graph, with_query_shapes
from ethereal_kafka.plan.sink_groups import group_sinks


def _connectors() -> tuple[dict[str, KafkaSourceConfig], dict[str, KafkaSinkConfig]]:
    source = KafkaSourceConfig.from_properties(
        {
            "name": "events",
            "bootstrap.servers": "b:9092",
            "topics": "in",
            "value.format": "json",
            "value.schema": "user string, amount long, ts long",
        }
    )
    sinks = {
        name: KafkaSinkConfig.from_properties(
            {"name": name, "bootstrap.servers": "b:9092", "topic": f"t-{name}"}
        )
        for name in ("totals", "late", "copy")
    }
    return {"events": source}, sinks


def double(element: dict[str, Any]) -> dict[str, Any]:
    return {**element, "amount": element["amount"] * 2}


def test_graph_description_groups_operators_by_query_and_says_where_they_run() -> None:
    sources, sinks = _connectors()
    env = StreamExecutionEnvironment()
    late = OutputTag("late")
    events = env.from_source("events").select("user", "amount", "ts")
    totals = (
        events.assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(Time.seconds(2)).with_timestamp_assigner("ts")
        )
        .key_by("user")
        .window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .side_output_late_data(late)
        .agg("sum(amount) AS total")
    )
    totals.sink_to("totals")
    totals.get_side_output(late).sink_to("late")
    events.map(double).sink_to("copy")
    graph = env.graph()
    plan = describe_graph(graph, group_sinks(graph, sources), sources, sinks, "exactly-once")
    plan = with_query_shapes(plan, {"copy": {"mode": "partition-preserving", "stateful": False}})
    assert [q["name"] for q in plan["queries"]] == ["late+totals", "copy"]
    assert plan["queries"][1]["mode"] == "partition-preserving"
    nodes = {(n["query"], n["label"]): (n["kind"], n["runs"]) for n in plan["nodes"]}
    assert nodes[(None, "events")] == ("source", "kafka-source")
    assert nodes[("late+totals", "select user, amount, ts")] == ("select", "spark-native")
    assert nodes[("copy", "select user, amount, ts")] == ("select", "spark-native")  # computed by each query
    assert nodes[("late+totals", "watermark ts (-2 s)")] == ("watermark", "spark-native")
    assert nodes[("late+totals", "key_by user")] == ("key_by", "spark-native")
    # A late-data side output needs the framework's window, even with Spark aggregate expressions.
    assert nodes[("late+totals", "window tumbling 10 s: agg sum(amount) AS total")] == ("window", "framework")
    assert nodes[("copy", "map double")] == ("map", "python")
    assert nodes[("late+totals", "late")] == ("sink", "kafka-sink")
    ids = {n["id"]: n["label"] for n in plan["nodes"]}
    edges = {(ids[e["source"]], ids[e["target"]], e["label"]) for e in plan["edges"]}
    window = "window tumbling 10 s: agg sum(amount) AS total"
    assert (window, "late", "side output late") in edges
    assert (window, "totals", None) in edges
    assert ("events", "select user, amount, ts", None) in edges
    sink = next(n for n in plan["nodes"] if n["id"] == "sink:copy")
    assert sink["detail"] == {
        "topic": "t-copy",
        "guarantee": "exactly-once",
        "key_format": "bytes",
        "value_format": "bytes",
    }


def test_dataframe_description_shows_queries_and_connectors() -> None:
    sources, sinks = _connectors()
    plan = describe_dataframe(
        [("copy", ["copy"], [])], sources, {"copy": sinks["copy"]}, "at-least-once", "m:f"
    )
    assert [(n["id"], n["runs"]) for n in plan["nodes"]] == [
        ("source:events", "kafka-source"),
        ("copy/pipeline", "dataframe"),
        ("sink:copy", "kafka-sink"),
    ]
    assert [(e["source"], e["target"]) for e in plan["edges"]] == [
        ("source:events", "copy/pipeline"),
        ("copy/pipeline", "sink:copy"),
    ]


def test_connected_and_broadcast_operators_show_both_inputs() -> None:
    from ethereal_kafka.api import KeyedBroadcastProcessFunction, KeyedCoProcessFunction, MapStateDescriptor

    class Co(KeyedCoProcessFunction):
        def process_element1(self, value: Any, ctx: Any) -> Any:
            return None

        def process_element2(self, value: Any, ctx: Any) -> Any:
            return None

    class Rules(KeyedBroadcastProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            return None

        def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
            return None

    source = KafkaSourceConfig.from_properties(
        {
            "name": "events",
            "bootstrap.servers": "b:9092",
            "topics": "in",
            "value.format": "json",
            "value.schema": "user string, amount long, ts long",
        }
    )
    rules = KafkaSourceConfig.from_properties(
        {
            "name": "rules",
            "bootstrap.servers": "b:9092",
            "topics": "r",
            "value.format": "json",
            "value.schema": "user string, limit long",
        }
    )
    sources = {"events": source, "rules": rules}
    sinks = {
        n: KafkaSinkConfig.from_properties({"name": n, "bootstrap.servers": "b:9092", "topic": f"t-{n}"})
        for n in ("co", "bc")
    }
    env = StreamExecutionEnvironment()
    events, limits = env.from_source("events"), env.from_source("rules")
    events.key_by("user").connect(limits.key_by("user")).process(Co(), output_type="n long").sink_to("co")
    state = MapStateDescriptor("rules")
    events.key_by("user").connect(limits.broadcast(state)).process(Rules()).sink_to("bc")
    graph = env.graph()
    plan = describe_graph(graph, group_sinks(graph, sources), sources, sinks, "exactly-once")
    by_kind = {n["kind"]: n for n in plan["nodes"]}
    co, bc = by_kind["coprocess"], by_kind["broadcast_process"]
    assert co["label"].startswith("co-process ") and co["runs"] == bc["runs"] != by_kind["broadcast"]["runs"]
    into = {(e["target"], e["source"]) for e in plan["edges"]}
    co_inputs = sorted(s for t, s in into if t == co["id"])
    assert len(co_inputs) == 2, co_inputs
    bc_inputs = sorted(s for t, s in into if t == bc["id"])
    assert by_kind["broadcast"]["id"] in bc_inputs and len(bc_inputs) == 2
