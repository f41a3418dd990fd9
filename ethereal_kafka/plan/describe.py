"""Describe a compiled job for people: its queries, and each operator with where it runs.

`describe_graph` reads a DataStream job graph and the compiler's grouping of its sinks into queries
(`plan.sink_groups`); `describe_dataframe` describes a DataFrame pipeline (or `transform.sql`) at the level of its
queries and connectors. Both are pure (no Spark, nothing runs) and return JSON-friendly dicts; the runner records
the description of every run (`runtime.description`) and the web UI draws it as the stream graph.

Shape: `{"style", "queries": [{"name", "sinks", "sources", "mode", "stateful", "output_mode", "chained"}], "nodes": [{"id",
"query", "kind", "label", "runs", "detail", "name", "uid", "auto", "description", "stateful"}], "edges": [{"source",
"target", "label"}]}`. An operator's `label` is its name when the pipeline gave one (`DataStream.name`), else what it
does (`description`: `process FraudDetector`); `uid` is its stable id (`DataStream.uid`, default `auto`, the
`kind#id` of its graph position); connectors have `name`, `uid`, `auto` None. `stateful` marks an operator that
keeps state between epochs (window, rolling aggregate, process function, join). Node ids: `source:NAME`,
`sink:NAME` and `table:NAME` for connectors, `QUERY/ID` for an operator of a query (an operator that two queries
compute, such as stateless work before their split, appears once in each). Side outputs are edges labelled
`side output TAG`, from the operator that emits them. `runs` is one of `RUNS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.windows import (
    CountWindows,
    EventTimeSessionWindows,
    GlobalWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    WindowAssigner,
)
from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.plan.sink_groups import STATEFUL, SinkGroup, ancestors
from ethereal_kafka.plan.state_inventory import declared_state

SOURCE = "kafka-source"
SPARK = "spark-native"
FRAMEWORK = "framework"
PYTHON = "python"
LOOKUP = "lookup"
SINK = "kafka-sink"
DATAFRAME = "dataframe"

#: Where an operator runs, as the UI names it.
RUNS = {
    SOURCE: "Kafka source (Python data source, Arrow batches)",
    SPARK: "Spark-native (in the JVM)",
    FRAMEWORK: "framework operator on Spark's transformWithState",
    PYTHON: "Python map stage (mapInArrow)",
    LOOKUP: "lookup in a global table (Python, RocksDB)",
    SINK: "Kafka sink (transactional writer)",
    DATAFRAME: "the pipeline function's DataFrame plan",
}

Description = dict[str, Any]


def describe_graph(
    graph: g.JobGraph,
    plans: Sequence[SinkGroup],
    sources: Mapping[str, KafkaSourceConfig],
    sinks: Mapping[str, KafkaSinkConfig],
    guarantee: str,
    tables: Mapping[str, Any] | None = None,
) -> Description:
    """Describe a DataStream job: one group of operators per query, the connectors they read and write.

    Args:
        graph: The job graph the pipeline function built.
        plans: The queries `plan.sink_groups.group_sinks` made of it.
        sources, sinks, tables: The job's connectors by name (tables: `KafkaTableConfig`s).
        guarantee: The job's delivery guarantee (shown on the sinks).
    """
    from ethereal_kafka.plan.event_time import carried_watermarks
    from ethereal_kafka.plan.joins import runs_native as join_native
    from ethereal_kafka.plan.windows import runs_native as window_native

    nodes: dict[str, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []
    for name, config in sources.items():
        nodes[f"source:{name}"] = _node(
            f"source:{name}", None, "source", name, SOURCE, _source_detail(config)
        )
    for plan in plans:
        members = set().union(*(ancestors(s) for s in plan.sinks))
        carry = {node: key for node, key, _ in carried_watermarks(plan.sinks)}
        for node in graph.nodes:
            if node.id not in members or isinstance(node, g.SourceNode | g.SideOutputNode):
                continue
            if isinstance(node, g.SinkNode):
                nid = f"sink:{node.sink}"
                detail = _sink_detail(sinks.get(node.sink), guarantee)
                nodes[nid] = _node(nid, plan.name, "sink", node.sink, SINK, detail)
            else:
                kind, label, runs, detail = _operator(node, window_native, join_native)
                if isinstance(node, g.WatermarkNode):
                    detail = {**detail, "carry_key": carry.get(node.id)}
                nid = f"{plan.name}/{node.id}"
                nodes[nid] = _node(nid, plan.name, kind, label, runs, detail, node)
                if isinstance(node, g.LookupJoinNode):
                    tid = f"table:{node.table}"
                    table = (tables or {}).get(node.table)
                    detail = {"topic": getattr(table, "topic", None)}
                    nodes.setdefault(tid, _node(tid, None, "table", node.table, LOOKUP, detail))
                    edges.append({"source": tid, "target": nid, "label": "lookup"})
            edges.extend(_edges_into(node, nid, plan.name))
    return {
        "style": "datastream",
        "queries": [
            {
                "name": plan.name,
                "sinks": [s.sink for s in plan.sinks],
                "sources": sorted(plan.sources),
                "mode": None,
                "stateful": None,
                "output_mode": None,
            }
            for plan in plans
        ],
        "nodes": list(nodes.values()),
        "edges": edges,
    }


def describe_dataframe(
    queries: Iterable[tuple[str, Sequence[str], Sequence[str]]],
    sources: Mapping[str, KafkaSourceConfig],
    sinks: Mapping[str, KafkaSinkConfig],
    guarantee: str,
    pipeline: str,
) -> Description:
    """Describe a DataFrame pipeline (or `transform.sql`): per query, the sources it reads, one node for the
    pipeline's DataFrame plan, and the sinks it writes.

    Args:
        queries: `(name, sink names, source names)` per query; no source names = every source of the job.
        pipeline: What builds the DataFrames (`module:function`, or `transform.sql`).
    """
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []
    out = []
    for name, config in sources.items():
        nodes[f"source:{name}"] = _node(
            f"source:{name}", None, "source", name, SOURCE, _source_detail(config)
        )
    for name, query_sinks, query_sources in queries:
        reads = list(query_sources) or list(sources)
        nid = f"{name}/pipeline"
        nodes[nid] = _node(nid, name, "pipeline", pipeline, DATAFRAME, {"pipeline": pipeline})
        edges += [{"source": f"source:{s}", "target": nid, "label": None} for s in reads]
        for sink in query_sinks:
            sid = f"sink:{sink}"
            nodes[sid] = _node(sid, name, "sink", sink, SINK, _sink_detail(sinks.get(sink), guarantee))
            edges.append({"source": nid, "target": sid, "label": None})
        out.append(
            {
                "name": name,
                "sinks": list(query_sinks),
                "sources": reads,
                "mode": None,
                "stateful": None,
                "output_mode": None,
            }
        )
    return {"style": "dataframe", "queries": out, "nodes": list(nodes.values()), "edges": edges}


def merged(graph: Description, frames: Description) -> Description:
    """A DataStream job's description with the queries of a DataFrame pipeline it added (`describe_dataframe`):
    one picture, each connector node once."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    for node in frames["nodes"]:
        nodes.setdefault(node["id"], node)
    return {
        **graph,
        "queries": [*graph["queries"], *frames["queries"]],
        "nodes": list(nodes.values()),
        "edges": [*graph["edges"], *frames["edges"]],
    }


def with_query_shapes(description: Description, shapes: Mapping[str, Mapping[str, Any]]) -> Description:
    """The description with each query's classification filled in (`{query: {"mode", "stateful",
    "output_mode", "chained"}}`, as the compiler decided it; `chained`: run in its source's read tasks,
    `plan.chaining`)."""
    queries = []
    for query in description["queries"]:
        shape = shapes.get(query["name"], {})
        keys = ("mode", "stateful", "output_mode", "chained")
        queries.append({**query, **{k: v for k, v in shape.items() if k in keys}})
    return {**description, "queries": queries}


def _node(
    nid: str,
    query: str | None,
    kind: str,
    label: str,
    runs: str,
    detail: Mapping[str, Any],
    operator: g.Node | None = None,
) -> dict[str, Any]:
    """One node of the description; `operator`: the graph node of an operator (its name, uid and ids)."""
    ref = operator.ref if operator is not None else None
    return {
        "id": nid,
        "query": query,
        "kind": kind,
        "label": ref.name if ref is not None and ref.name else label,
        "runs": runs,
        "detail": dict(detail),
        "name": ref.display if ref is not None else None,
        "uid": ref.uid if ref is not None else None,
        "auto": ref.auto if ref is not None else None,
        "description": label,
        "stateful": isinstance(operator, STATEFUL),
    }


def _edges_into(node: g.Node, nid: str, query: str) -> list[dict[str, Any]]:
    """The edges from `node`'s inputs to it (a side-output selection becomes the edge's label)."""
    out = []
    for parent in node.inputs:
        label = None
        if isinstance(parent, g.SideOutputNode):
            label = f"side output {parent.tag.name if parent.tag is not None else '?'}"
            parent = parent.inputs[0]
        source = f"source:{parent.source}" if isinstance(parent, g.SourceNode) else f"{query}/{parent.id}"
        out.append({"source": source, "target": nid, "label": label})
    return out


def _operator(node: g.Node, window_native: Any, join_native: Any) -> tuple[str, str, str, dict[str, Any]]:
    """`(kind, label, runs, detail)` of one operator node."""
    if isinstance(node, g.MapNode):
        return node.kind, f"{node.kind} {_name(node.function)}", PYTHON, {"output_type": node.output_type}
    if isinstance(node, g.ExprNode):
        text = ", ".join(_expression(c) for c in node.columns)
        if node.kind == "with_columns":
            text = ", ".join(
                f"{n} = {_expression(c)}" for n, c in zip(node.names, node.columns, strict=False)
            )
        return node.kind, f"{node.kind} {text}", SPARK, {"columns": text}
    if isinstance(node, g.WatermarkNode):
        strategy = node.strategy
        assigner = strategy.timestamp_assigner
        field = _name(assigner) if assigner is not None else strategy.timestamp_field
        detail = {
            "timestamp": field,
            "out_of_orderness_ms": strategy.out_of_orderness.millis,
            "idleness_ms": strategy.idleness.millis if strategy.idleness is not None else None,
        }
        label = f"watermark {field} (-{_span(strategy.out_of_orderness.millis)})"
        return "watermark", label, PYTHON if assigner is not None else SPARK, detail
    if isinstance(node, g.KeyByNode):
        key = ", ".join(node.fields) if node.fields else _name(node.selector)
        return "key_by", f"key_by {key}", PYTHON if node.selector is not None else SPARK, {"key": key}
    if isinstance(node, g.WindowNode):
        return _window(node, window_native(node))
    if isinstance(node, g.RollingNode):
        what = node.field_name if node.kind in ("sum", "min", "max") else _name(node.function)
        return "rolling", f"rolling {node.kind} {what}", FRAMEWORK, {"kind": node.kind}
    if isinstance(node, g.CoProcessNode):
        tags = [t.name for t in node.side_outputs]
        detail = {
            "time_mode": node.time_mode,
            "side_outputs": tags,
            "inputs": 2,
            "state_vars": declared_state(node.function),
        }
        return "coprocess", f"co-process {_name(node.function)}", FRAMEWORK, detail
    if isinstance(node, g.BroadcastProcessNode):
        tags = [t.name for t in node.side_outputs]
        detail = {"keyed": node.keyed, "side_outputs": tags, "inputs": 2}
        return "broadcast_process", f"broadcast process {_name(node.function)}", FRAMEWORK, detail
    if isinstance(node, g.BroadcastNode):
        names = [d.name for d in node.descriptors]
        return "broadcast", f"broadcast {', '.join(names)}", SPARK, {"state": names}
    if isinstance(node, g.ProcessNode):
        tags = [t.name for t in node.side_outputs]
        detail = {
            "time_mode": node.time_mode,
            "side_outputs": tags,
            "state_vars": declared_state(node.function),
        }
        return "process", f"process {_name(node.function)}", FRAMEWORK, detail
    if isinstance(node, g.UnionNode):
        return "union", "union", SPARK, {}
    if isinstance(node, g.JoinNode):
        native = join_native(node)
        if node.window is not None:
            what = f"window {_assigner(node.window)}"
        else:
            what = f"interval [{node.lower}, {node.upper}] ms"
        detail = {
            "how": node.how,
            "left_key": list(node.left_key),
            "right_key": list(node.right_key),
            "on": what,
        }
        return "join", f"{node.how} join ({what})", SPARK if native else FRAMEWORK, detail
    if isinstance(node, g.LookupJoinNode):
        key = node.key or _name(node.selector)
        detail = {"table": node.table, "key": key, "how": node.how, "prefix": node.prefix}
        return "lookup", f"lookup {node.table} by {key}", LOOKUP, detail
    return type(node).__name__.removesuffix("Node").lower(), node.label, SPARK, {}


def _window(node: g.WindowNode, native: bool) -> tuple[str, str, str, dict[str, Any]]:
    function = node.function
    what = function.kind if function is not None else "?"
    if function is not None and function.kind != "agg":
        what = f"{function.kind} {_name(function.function)}"
    elif function is not None:
        what = "agg " + ", ".join(_expression(c) for c in function.columns)
    detail: dict[str, Any] = {
        "assigner": _assigner(node.assigner),
        "trigger": type(node.trigger).__name__ if node.trigger is not None else None,
        "allowed_lateness_ms": node.allowed_lateness.millis,
        "late_output": node.late_tag.name if node.late_tag is not None else None,
        "function": what,
    }
    label = f"window {_assigner(node.assigner)}: {what}"
    return "window", label, SPARK if native else FRAMEWORK, detail


def _assigner(assigner: WindowAssigner | None) -> str:
    if isinstance(assigner, TumblingEventTimeWindows):
        return f"tumbling {_span(assigner.size.millis)}"
    if isinstance(assigner, SlidingEventTimeWindows):
        return f"sliding {_span(assigner.size.millis)} every {_span(assigner.slide.millis)}"
    if isinstance(assigner, EventTimeSessionWindows):
        return f"session gap {_span(assigner.gap.millis)}"
    if isinstance(assigner, CountWindows):
        return f"count {assigner.size}" + (f" every {assigner.slide}" if assigner.slide else "")
    if isinstance(assigner, GlobalWindows):
        return "global"
    return type(assigner).__name__ if assigner is not None else "?"


def _span(ms: int) -> str:
    if ms and ms % 3_600_000 == 0:
        return f"{ms // 3_600_000} h"
    if ms and ms % 60_000 == 0:
        return f"{ms // 60_000} min"
    if ms and ms % 1000 == 0:
        return f"{ms // 1000} s"
    return f"{ms} ms"


def _name(function: Any) -> str:
    """A user function's name: its qualified name, or its class's for a function object."""
    if function is None:
        return "?"
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return str(name).replace("<locals>.", "")


def _expression(column: Any) -> str:
    """A column expression as text (`Column<'(amount >= 50)'>` becomes `(amount >= 50)`)."""
    text = str(column)
    if text.startswith("Column<'") and text.endswith("'>"):
        return text[len("Column<'") : -2]
    return text


def _source_detail(config: KafkaSourceConfig) -> dict[str, Any]:
    return {
        "topics": list(config.topics),
        "topic_pattern": config.topic_pattern,
        "key_format": config.key_format,
        "value_format": config.value_format,
        "group": config.group,
        "starting_offsets": config.starting_offsets,
        "max_records_per_epoch": config.max_records_per_epoch,
    }


def _sink_detail(config: KafkaSinkConfig | None, guarantee: str) -> dict[str, Any]:
    if config is None:
        return {"guarantee": guarantee}
    return {
        "topic": config.topic,
        "guarantee": guarantee,
        "key_format": config.key_format,
        "value_format": config.value_format,
    }
