"""Group a graph's sinks into queries, and find where a multi-sink query splits.

Rules (each keeps a stateful operator in exactly one query, where its state and checkpoint live):

- Sinks whose streams share a stateful operator (window, rolling aggregate, process function, join) are written
  by one query. Other sinks each get their own query; stateless work they share is computed once per query.
- In a query with several sinks, the **fork** is the last node every one of its sinks reads through. Above the
  fork the query is one Spark plan; below it each sink's *branch* may only hold per-element Python operators
  (`map`/`flat_map`/`filter`) and, first, the choice of a side output. Branches run in one fan-out step that
  tags each row with its sink.
- Two queries reading one source read it with their own consumer group (`<group>.<query>`), so their committed
  offsets and markers never collide (counting the job's DataFrame queries beside its graph: `also_read`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.config.connectors import KafkaSourceConfig

#: Node types that keep state between epochs.
STATEFUL = (
    g.WindowNode,
    g.RollingNode,
    g.ProcessNode,
    g.JoinNode,
    g.BroadcastProcessNode,
)  # CoProcessNode is a ProcessNode


@dataclass(frozen=True)
class Branch:
    """What lies between a query's fork and one of its sinks.

    Attributes:
        sink: The sink node.
        tag: The side output the branch reads (None: the fork's main output).
        ops: Per-element Python operators, in order (`MapNode`s).
    """

    sink: g.SinkNode
    tag: str | None
    ops: tuple[g.MapNode, ...]


@dataclass(frozen=True)
class SinkGroup:
    """The graph nodes one query will write, before it is compiled (`plan.compiler` makes it a `plan.query.Query`):
    its name, its sinks, its fork (multi-sink), the branches, and its sources."""

    name: str
    sinks: tuple[g.SinkNode, ...]
    fork: g.Node | None
    branches: tuple[Branch, ...]
    sources: dict[str, KafkaSourceConfig]


def ancestors(node: g.Node) -> set[int]:
    """Ids of `node` and every node it reads from, transitively."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current.id not in seen:
            seen.add(current.id)
            stack.extend(current.inputs)
    return seen


def group_sinks(
    graph: g.JobGraph, sources: dict[str, KafkaSourceConfig], also_read: Mapping[str, int] | None = None
) -> list[SinkGroup]:
    """Group sinks and find forks and branches (see the module docstring). `also_read`: per source, how many
    queries outside the graph read it too (the job's DataFrame queries, `env.add_dataframe_pipeline`).

    Raises:
        GraphError: a branch below a fork holds an operator other than per-element Python functions.
    """
    by_id = {n.id: n for n in graph.nodes}
    reach = {s.id: ancestors(s) for s in graph.sinks}
    parent = {s.id: s.id for s in graph.sinks}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for node in graph.nodes:
        if isinstance(node, STATEFUL):
            readers = [s.id for s in graph.sinks if node.id in reach[s.id]]
            for other in readers[1:]:
                parent[root(other)] = root(readers[0])
    groups: dict[int, list[g.SinkNode]] = {}
    for sink in graph.sinks:
        groups.setdefault(root(sink.id), []).append(sink)
    ordered = sorted(groups.values(), key=lambda members: min(s.id for s in members))
    reads: dict[str, int] = dict(also_read or {})
    for members in ordered:
        for name in _sources_read(members, by_id):
            reads[name] = reads.get(name, 0) + 1
    plans = []
    for members in ordered:
        name = "+".join(sorted(s.sink for s in members))
        own = {}
        for source in _sources_read(members, by_id):
            config = sources[source]
            if reads[source] > 1:
                config = dataclasses.replace(config, group_id=f"{config.group}.{name}")
            own[source] = config
        fork, branches = _split(members, reach, by_id) if len(members) > 1 else (None, ())
        plans.append(SinkGroup(name, tuple(members), fork, branches, own))
    return plans


def _sources_read(members: list[g.SinkNode], by_id: dict[int, g.Node]) -> list[str]:
    names: set[str] = set()
    for sink in members:
        for i in ancestors(sink):
            node = by_id[i]
            if isinstance(node, g.SourceNode):
                names.add(node.source)
    return sorted(names)


def _split(
    members: list[g.SinkNode], reach: dict[int, set[int]], by_id: dict[int, g.Node]
) -> tuple[g.Node, tuple[Branch, ...]]:
    common = set.intersection(*(reach[s.id] - {s.id} for s in members))
    # The fork: the common node that every other common node is an ancestor of.
    fork_id = max(common, key=lambda i: len(ancestors(by_id[i]) & common))
    fork = by_id[fork_id]
    if len(ancestors(fork) & common) != len(common):
        raise GraphError(
            f"sinks {', '.join(s.sink for s in members)} share a stateful operator but their streams do not "
            "split at one point; write them from one stream, or split before the stateful operator"
        )
    return fork, tuple(_branch(sink, fork) for sink in members)


def _branch(sink: g.SinkNode, fork: g.Node) -> Branch:
    chain: list[g.Node] = []
    node = sink.inputs[0]
    while node.id != fork.id:
        chain.append(node)
        if len(node.inputs) != 1:
            raise GraphError(f"{node.label} reads several streams below the split at {fork.label}")
        node = node.inputs[0]
    chain.reverse()
    tag = None
    if chain and isinstance(chain[0], g.SideOutputNode):
        tag = chain[0].tag.name if chain[0].tag is not None else None
        chain = chain[1:]
    for op in chain:
        if not isinstance(op, g.MapNode):
            raise GraphError(
                f"{op.label} is below the split at {fork.label}, where only per-element Python functions (map, "
                f"flat_map, filter) may run before a sink; move it above the split or give the sink its own stream"
            )
    return Branch(sink, tag, tuple(op for op in chain if isinstance(op, g.MapNode)))
