"""Rows in and out of each operator of a query's stream graph, from the SQL metrics Spark keeps for the epoch.

Spark counts the rows of its physical operators in every micro-batch whatever the job does (SQL metrics, summed
from the tasks on the driver): a Python stage's rows out (`pythonNumRowsReceived` of `MapInArrow`), a framework
operator's (`numOutputRows` of `TransformWithStateInPySpark`), a scan's, a filter's, a stateful aggregation's. This
module reads those figures from the physical plan an epoch ran (`read_plan`, on the driver, once per epoch: no
per-record work anywhere) and attributes them to the operators of the graph the UI draws (`operator_rows`):

- **Anchors** are operators that keep their own physical node: the sources (`MicroBatchScan`), Python stages
  (`MapInArrow` running a `PyStage` for `runs=python`, a `LookupStage` for `runs=lookup`), framework operators
  (`TransformWithStateInPySpark`) and Spark's stateful operators (`StateStoreSave`, `StreamingSymmetricHashJoin`,
  ...). Each kind's anchors are matched in lineage order (a post-order walk of the graph from the query's sinks and
  of the physical tree from its root). When the sequences differ (a plan shape this matching does not know), no
  anchor of that query gets a figure: figures are left out rather than guessed.
- **The other operators** run as Spark expressions fused into their neighbours and have no node of their own:
  one that cannot change the number of rows (`select`, `with_columns`, a watermark on a field, `key_by` fields,
  `union`) has in = out = what its inputs emit (an input that also feeds another operator or a side output
  splits its rows uncounted: None); one that can (`where`) gets its rows out from the input count of
  the anchor it feeds, when it is that anchor's only input; else its figure is None (not available).
- Python steps after a query's fork towards several sinks run fused in one fan-out stage: None.
- An epoch without new data (run to close windows when the watermark moved) reads an empty `LocalTableScan` in
  place of a source's scan: it counts as that source's anchor (0 rows), so the epoch's figures are 0 rows read and
  what the stateful operators emitted.
- A chained query (`plan.chaining`) has no Spark node per operator: its read tasks count each step's rows
  themselves and report them in their summary rows (`chained_rows`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ethereal_kafka.connectors.event_time import CARRIER_COLUMN
from ethereal_kafka.plan.schema import TS

#: Physical operators that pass every row through (the count below them is theirs).
PASS_THROUGH = frozenset(
    {
        "WholeStageCodegen",
        "InputAdapter",
        "Project",
        "Sort",
        "Exchange",
        "EventTimeWatermark",
        "ColumnarToRow",
        "RowToColumnar",
        "ShuffleQueryStage",
        "AQEShuffleRead",
        "AdaptiveSparkPlan",
        "ReusedExchange",
    }
)
#: The SQL metric holding the rows a physical operator emitted (default: `numOutputRows`).
ROWS_METRIC = {"MapInArrow": "pythonNumRowsReceived", "PythonMapInArrow": "pythonNumRowsReceived"}
PYTHON_STAGES = frozenset({"MapInArrow", "PythonMapInArrow"})
SPARK_STATEFUL = frozenset(
    {
        "StateStoreSave",
        "SessionWindowStateStoreSave",
        "StreamingSymmetricHashJoin",
        "StreamingDeduplicate",
        "StreamingDeduplicateWithinWatermark",
    }
)
FRAMEWORK = frozenset({"TransformWithStateInPySpark", "TransformWithStateInPandas", "TransformWithState"})
SCANS = frozenset({"MicroBatchScan"})
#: What Spark reads in place of a source that has no new data in the epoch (an empty streaming `LocalRelation`).
EMPTY_SCAN = "LocalTableScan"
#: The leaf `read_plan` gives an input's event-time carrier scan (`plan.event_time`).
CARRIER = "EventTimeCarrier"
#: Graph operator kinds (`plan.describe`) that never change the number of rows.
ROW_PRESERVING = frozenset({"select", "with_columns", "watermark", "key_by", "union"})

Rows = tuple[int | None, int | None]


@dataclass(frozen=True)
class PhysicalOp:
    """One operator of an executed physical plan, as `read_plan` read it.

    Attributes:
        name: Spark's node name (`MapInArrow`, `TransformWithStateInPySpark`, `Filter`, ...).
        rows: The rows it emitted in the epoch, None when Spark counts none for it.
        stage: For a Python stage, the class of the function it runs (`PyStage`, `FanOut`, `LookupStage`, ...).
        children: Its inputs, in Spark's order.
    """

    name: str
    rows: int | None = None
    stage: str = ""
    children: tuple[PhysicalOp, ...] = ()


def read_plan(node: Any) -> PhysicalOp:
    """The tree under a JVM `SparkPlan` (py4j), with each operator's row count (one metric read per counting
    operator; pass-through operators read none). Called on the driver after an epoch's write returned, when the
    plan's SQL metrics hold the whole epoch.

    An input's event-time carrier (`plan.event_time`) is no operator of the graph: its scan (the only one whose
    output has the event-time column but not the carrier flag) is left out of the union it feeds; where Spark
    dropped the input's own branch (no new records in the epoch), the carrier stands in for that source's empty
    scan."""
    return _settle(_read(node))


def _read(node: Any) -> PhysicalOp:
    name = str(node.nodeName())
    children = node.children()
    kids = tuple(_read(children.apply(i)) for i in range(children.size()))
    if not kids and name in SCANS | {EMPTY_SCAN}:
        names = set(node.schema().fieldNames())
        if TS in names and CARRIER_COLUMN not in names:
            return PhysicalOp(CARRIER)
    if name == "Union":
        kids = without_carriers(kids)
    if name in PASS_THROUGH:
        return PhysicalOp(name, None, "", kids)
    metric = node.metrics().get(ROWS_METRIC.get(name, "numOutputRows"))
    rows = int(metric.get().value()) if metric.isDefined() else None
    stage = str(node.func().toString()).split("(", 1)[0] if name in PYTHON_STAGES else ""
    return PhysicalOp(name, rows, stage, kids)


def _settle(op: PhysicalOp) -> PhysicalOp:
    """`op` with each carrier leaf left (one whose input's own branch Spark dropped) read as an empty scan."""
    if op.name == CARRIER and not op.children:
        return PhysicalOp(EMPTY_SCAN, 0)
    if not op.children:
        return op
    return PhysicalOp(op.name, op.rows, op.stage, tuple(_settle(c) for c in op.children))


def without_carriers(branches: Sequence[PhysicalOp]) -> tuple[PhysicalOp, ...]:
    """A union's inputs without its event-time carrier branches (each a chain of single-input operators ending at
    a `CARRIER` leaf)."""

    def carrier(op: PhysicalOp) -> bool:
        while len(op.children) == 1:
            op = op.children[0]
        return op.name == CARRIER and not op.children

    return tuple(b for b in branches if not carrier(b))


def rows_below(op: PhysicalOp) -> int | None:
    """The rows `op` emitted: its own count, or through pass-through operators its input's; a union's is the sum
    of its inputs'; None when not counted."""
    if op.rows is not None:
        return op.rows
    if op.name == "Union" and op.children:
        counts = [rows_below(c) for c in op.children]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)
    if op.name in PASS_THROUGH and len(op.children) == 1:
        return rows_below(op.children[0])
    return None


def physical_kind(op: PhysicalOp, empty_scans: bool = False) -> str | None:
    """The anchor kind of a physical operator (see the module docstring), or None; with `empty_scans`, an empty
    `LocalTableScan` leaf is a scan (a source without new data)."""
    if op.name in SCANS or (empty_scans and op.name == EMPTY_SCAN and op.rows == 0 and not op.children):
        return "scan"
    if op.name in FRAMEWORK:
        return "framework"
    if op.name in SPARK_STATEFUL:
        return "spark-stateful"
    if op.name in PYTHON_STAGES:
        return {"PyStage": "python", "LookupStage": "lookup"}.get(op.stage)
    return None


def physical_anchors(root: PhysicalOp, empty_scans: bool = False) -> list[tuple[str, PhysicalOp]]:
    """`(kind, operator)` of the anchors under `root`, in post-order (inputs first, in Spark's order)."""
    out: list[tuple[str, PhysicalOp]] = []

    def visit(op: PhysicalOp) -> None:
        for child in op.children:
            visit(child)
        kind = physical_kind(op, empty_scans)
        if kind is not None:
            out.append((kind, op))

    visit(root)
    return out


def _inputs_of(query: str, edges: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    inputs: dict[str, list[str]] = {}
    for edge in edges:
        target = str(edge["target"])
        if target.startswith(f"{query}/") or target.startswith("sink:"):
            inputs.setdefault(target, []).append(str(edge["source"]))
    return inputs


def graph_order(description: Mapping[str, Any], query: str) -> list[dict[str, Any]]:
    """The nodes of `query` (its sources included, its sinks not), inputs before the node, from its sinks in order."""
    nodes = {str(n["id"]): n for n in description.get("nodes", ())}
    sinks = next((q.get("sinks") or [] for q in description.get("queries", ()) if q.get("name") == query), [])
    inputs = _inputs_of(query, description.get("edges", ()))
    seen: set[str] = set()
    order: list[dict[str, Any]] = []

    def visit(nid: str) -> None:
        if nid in seen or nid not in nodes:
            return
        seen.add(nid)
        node = nodes[nid]
        if node.get("kind") != "source":
            for parent in inputs.get(nid, ()):
                if parent.startswith("table:"):
                    continue
                visit(parent)
        if node.get("kind") != "sink":
            order.append(node)

    for sink in sinks:
        sid = f"sink:{sink}"
        seen.add(sid)
        for parent in inputs.get(sid, ()):
            visit(parent)
    return order


def graph_kind(node: Mapping[str, Any], fused: bool) -> str | None:
    """The anchor kind of a graph node, or None (a Spark expression, or a Python step fused into a fan-out)."""
    if node.get("kind") == "source":
        return "scan"
    runs = node.get("runs")
    if runs == "python":
        return None if fused else "python"
    if runs in ("lookup", "framework"):
        return str(runs)
    if runs == "spark-native" and node.get("kind") in ("window", "join"):
        return "spark-stateful"
    return None


def operator_rows(description: Mapping[str, Any], query: str, plan: PhysicalOp) -> dict[str, Rows]:
    """`{node id: (rows in, rows out)}` of `query`'s operators (sources and sinks left out) in one epoch whose
    physical plan is `plan`; a figure that cannot be attributed is None (see the module docstring)."""
    order = graph_order(description, query)
    inputs = _inputs_of(query, description.get("edges", ()))
    consumers: dict[str, list[str]] = {}
    for target, parents in inputs.items():
        for parent in parents:
            consumers.setdefault(parent, []).append(target)
    fused = _after_fork(order, consumers)
    wanted = [(n, graph_kind(n, str(n["id"]) in fused)) for n in order]
    anchors = [(n, k) for n, k in wanted if k is not None]
    matched: dict[str, PhysicalOp] = {}
    # An epoch without new data for a source (Spark runs one when the watermark moves) reads an empty relation in
    # place of that source's scan: tried only when the plan does not match with the scans it has.
    for empty_scans in (False, True):
        found = physical_anchors(plan, empty_scans)
        if [k for _, k in anchors] == [k for k, _ in found]:
            matched = {str(n["id"]): op for (n, _), (_, op) in zip(anchors, found, strict=True)}
            break
    out: dict[str, Rows] = {}
    emitted: dict[str, int | None] = {}
    for node in order:
        nid = str(node["id"])
        op = matched.get(nid)
        parents = [p for p in inputs.get(nid, ()) if not p.startswith("table:")]
        # A parent feeding several consumers (a fork, a side output) splits its rows in a way Spark does not count.
        known = [emitted.get(p) if len(consumers.get(p, ())) == 1 else None for p in parents]
        rows_in = sum(k for k in known if k is not None) if known and None not in known else None
        if op is not None and rows_in is None and op.children:
            rows_in = _sum_or_none(rows_below(c) for c in op.children)
        if node.get("kind") == "source":
            emitted[nid] = op.rows if op is not None else None
            continue
        if op is not None:
            rows_out = op.rows
        elif node.get("kind") in ROW_PRESERVING and node.get("runs") == "spark-native":
            rows_out = rows_in
        else:
            rows_out = _fed_count(nid, consumers, inputs, matched)
        emitted[nid] = rows_out
        out[nid] = (rows_in, rows_out)
    return out


def chained_rows(description: Mapping[str, Any], query: str, steps: Sequence[int]) -> dict[str, Rows]:
    """`operator_rows` of a chained query (`plan.chaining`: a source, then Python operators in a line) from its
    steps' rows out (`steps[0]` the source's): operator i's rows in are step i-1's, its rows out step i's. A graph
    that is not that line (a plan shape the chain does not match) gets no figures."""
    order = graph_order(description, query)
    operators = [str(n["id"]) for n in order if n.get("kind") != "source"]
    if len(order) - len(operators) != 1 or len(operators) != len(steps) - 1:
        return {nid: (None, None) for nid in operators}
    return {nid: (steps[i], steps[i + 1]) for i, nid in enumerate(operators)}


def _fed_count(
    nid: str,
    consumers: Mapping[str, list[str]],
    inputs: Mapping[str, list[str]],
    matched: Mapping[str, PhysicalOp],
) -> int | None:
    """The rows a node without a count emitted, when it is the only input of one matched anchor: what that
    anchor's physical input counted."""
    targets = consumers.get(nid, [])
    if len(targets) != 1 or len(inputs.get(targets[0], ())) != 1:
        return None
    anchor = matched.get(targets[0])
    if anchor is None or len(anchor.children) != 1:
        return None
    return rows_below(anchor.children[0])


def _after_fork(order: Sequence[Mapping[str, Any]], consumers: Mapping[str, list[str]]) -> set[str]:
    """Ids of the nodes downstream of a node feeding several consumers in the query (a fork towards sinks)."""
    ids = {str(n["id"]) for n in order}
    fused: set[str] = set()
    for node in order:
        nid = str(node["id"])
        if node.get("kind") == "source":
            continue
        targets = [t for t in consumers.get(nid, []) if t in ids or t.startswith("sink:")]
        if len(targets) > 1:
            stack = [t for t in targets if t in ids]
            while stack:
                current = stack.pop()
                if current not in fused:
                    fused.add(current)
                    stack.extend(t for t in consumers.get(current, []) if t in ids)
    return fused


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    counts = list(values)
    return None if not counts or None in counts else sum(c for c in counts if c is not None)
