"""Per-operator rows from an epoch's physical plan (`runtime.operator_rows`), on the plan shapes Spark gives."""

from __future__ import annotations

import itertools
from typing import Any

from ethereal_kafka.runtime.operator_rows import (
    CARRIER,
    PhysicalOp,
    chained_rows,
    operator_rows,
    without_carriers,
)

Q = "late+totals"


def _node(nid: str, kind: str, runs: str, query: str | None = Q) -> dict[str, Any]:
    return {"id": nid, "query": query, "kind": kind, "label": nid, "runs": runs, "detail": {}}


def _windowed() -> dict[str, Any]:
    """events -> select -> watermark -> filter valid (Python) -> key_by -> window (framework) -> totals, late."""
    nodes = [
        _node("source:events", "source", "kafka-source", None),
        _node(f"{Q}/1", "select", "spark-native"),
        _node(f"{Q}/2", "watermark", "spark-native"),
        _node(f"{Q}/3", "filter", "python"),
        _node(f"{Q}/4", "key_by", "spark-native"),
        _node(f"{Q}/5", "window", "framework"),
        _node("sink:totals", "sink", "kafka-sink"),
        _node("sink:late", "sink", "kafka-sink"),
    ]
    chain = ["source:events", f"{Q}/1", f"{Q}/2", f"{Q}/3", f"{Q}/4", f"{Q}/5"]
    edges = [{"source": a, "target": b, "label": None} for a, b in itertools.pairwise(chain)]
    edges += [
        {"source": f"{Q}/5", "target": "sink:totals", "label": None},
        {"source": f"{Q}/5", "target": "sink:late", "label": "side output late"},
    ]
    return {"queries": [{"name": Q, "sinks": ["totals", "late"]}], "nodes": nodes, "edges": edges}


def _chain(*ops: PhysicalOp) -> PhysicalOp:
    """`ops` from the root down, each the only child of the one before (the last keeps its own children)."""
    below: tuple[PhysicalOp, ...] = (ops[-1],)
    for op in reversed(ops[:-1]):
        below = (PhysicalOp(op.name, op.rows, op.stage, below),)
    return below[0]


def _windowed_plan(scanned: int, kept: int, emitted: int) -> PhysicalOp:
    """The physical plan Spark 4.3 runs for `_windowed` (as read from a real epoch)."""
    return _chain(
        PhysicalOp("WholeStageCodegen"),
        PhysicalOp("Project"),
        PhysicalOp("Generate", emitted),
        PhysicalOp("InputAdapter"),
        PhysicalOp("TransformWithStateInPySpark", emitted),
        PhysicalOp("WholeStageCodegen"),
        PhysicalOp("Sort"),
        PhysicalOp("Exchange"),
        PhysicalOp("Project"),
        PhysicalOp("MapInArrow", kept, "PyStage"),
        PhysicalOp("EventTimeWatermark"),
        PhysicalOp("Project"),
        PhysicalOp("MicroBatchScan", scanned),
    )


def test_python_and_framework_operators_get_spark_counts_and_expressions_pass_them_on() -> None:
    rows = operator_rows(_windowed(), Q, _windowed_plan(scanned=300, kept=297, emitted=40))
    assert rows == {
        f"{Q}/1": (300, 300),  # select: as many rows as it reads
        f"{Q}/2": (300, 300),  # watermark on a field
        f"{Q}/3": (300, 297),  # the Python filter dropped 3
        f"{Q}/4": (297, 297),
        f"{Q}/5": (297, 40),  # the window's results and late records
    }


def test_an_epoch_without_new_data_counts_zero_rows_read_and_the_windows_results() -> None:
    """A no-data epoch (the watermark moved: Spark runs one to close windows) reads an empty `LocalRelation` in
    place of the source's scan; its figures are zero rows in, and what the window emitted, not n/a."""
    plan = _chain(
        *[PhysicalOp(op.name, op.rows, op.stage) for op in _flatten(_windowed_plan(0, 0, 354))[:-2]],
        PhysicalOp("LocalTableScan", 0),
    )
    rows = operator_rows(_windowed(), Q, plan)
    assert rows == {
        f"{Q}/1": (0, 0),
        f"{Q}/2": (0, 0),
        f"{Q}/3": (0, 0),
        f"{Q}/4": (0, 0),
        f"{Q}/5": (0, 354),
    }


def test_an_empty_local_relation_is_no_source_when_the_plan_matches_with_its_scans() -> None:
    plan = PhysicalOp("Union", None, "", (_windowed_plan(300, 297, 40), PhysicalOp("LocalTableScan", 0)))
    rows = operator_rows(_windowed(), Q, plan)
    assert rows[f"{Q}/3"] == (300, 297) and rows[f"{Q}/5"] == (297, 40)


def test_a_native_filter_gets_its_rows_out_from_the_stage_it_feeds() -> None:
    description = _windowed()
    for node in description["nodes"]:
        if node["id"] == f"{Q}/2":
            node["kind"] = "where"
    plan = _windowed_plan(scanned=300, kept=250, emitted=10)
    # Spark's filter sits below the Python stage; the stage's input counted 280.
    plan = _chain(
        *[
            PhysicalOp(op.name, op.rows, op.stage)
            for op in _flatten(plan)
            if op.name != "MicroBatchScan" and op.name != "EventTimeWatermark"
        ],
        PhysicalOp("Filter", 280),
        PhysicalOp("MicroBatchScan", 300),
    )
    rows = operator_rows(description, Q, plan)
    assert rows[f"{Q}/2"] == (300, 280)
    assert rows[f"{Q}/3"] == (280, 250)


def test_an_unknown_plan_shape_gives_no_figure_rather_than_a_wrong_one() -> None:
    plan = _windowed_plan(300, 297, 40)
    extra = _chain(PhysicalOp("MapInArrow", 7, "PyStage"), plan)  # a Python stage the graph does not have
    rows = operator_rows(_windowed(), Q, extra)
    assert rows[f"{Q}/3"] == (None, None) and rows[f"{Q}/5"] == (None, None)
    assert rows[f"{Q}/1"] == (None, None)  # the source's count is not attributed either


def test_python_steps_after_a_fork_run_fused_and_show_no_figure() -> None:
    description = _windowed()
    description["nodes"].append(_node(f"{Q}/6", "map", "python"))
    description["edges"] = [e for e in description["edges"] if e["target"] != "sink:late"]
    description["edges"] += [
        {"source": f"{Q}/5", "target": f"{Q}/6", "label": "side output late"},
        {"source": f"{Q}/6", "target": "sink:late", "label": None},
    ]
    plan = _chain(PhysicalOp("MapInArrow", 40, "FanOut"), _windowed_plan(300, 297, 40))
    rows = operator_rows(description, Q, plan)
    assert rows[f"{Q}/5"] == (297, 40)
    assert rows[f"{Q}/6"] == (None, None)


def _flatten(op: PhysicalOp) -> list[PhysicalOp]:
    out = [op]
    while op.children:
        op = op.children[0]
        out.append(op)
    return out


def test_an_inputs_event_time_carrier_is_left_out_of_its_union() -> None:
    """A query with two watermarked inputs unions each with its carrier (`plan.event_time`); `read_plan` reads the
    carrier's scan as a `CARRIER` leaf, and the union keeps only the input's own branch."""
    data = _chain(PhysicalOp("Project"), PhysicalOp("MicroBatchScan", 300))
    carried = _chain(PhysicalOp("Project"), PhysicalOp(CARRIER))
    assert without_carriers((data, carried)) == (data,)
    assert without_carriers((carried,)) == ()
    plain = _windowed_plan(scanned=300, kept=297, emitted=40)
    assert without_carriers((plain,)) == (plain,)


def test_a_chained_querys_operators_get_the_rows_its_tasks_counted() -> None:
    """A chained query (source, then Python operators in a line): operator i's rows in are step i-1's rows out,
    its rows out step i's; steps that do not line up with the graph give no figure."""
    nodes = [
        _node("source:lines", "source", "kafka-source", None),
        _node("words/1", "flat_map", "python", "words"),
        _node("words/2", "filter", "python", "words"),
        _node("sink:words", "sink", "kafka-sink", "words"),
    ]
    line = ["source:lines", "words/1", "words/2", "sink:words"]
    edges = [{"source": a, "target": b, "label": None} for a, b in itertools.pairwise(line)]
    description = {"queries": [{"name": "words", "sinks": ["words"]}], "nodes": nodes, "edges": edges}
    assert chained_rows(description, "words", [10, 42, 30]) == {"words/1": (10, 42), "words/2": (42, 30)}
    assert chained_rows(description, "words", [10, 42]) == {"words/1": (None, None), "words/2": (None, None)}
