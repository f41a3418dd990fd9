"""`runtime.savepoint.downstream_first`: which of Spark's stateful operators of a query is which framework
operator."""

from __future__ import annotations

from ethereal_kafka.runtime.savepoint import downstream_first


def test_a_querys_stateful_operators_are_matched_from_the_sink_up_only_in_a_chain() -> None:
    """Spark numbers a query's stateful operators from the sink up (`runtime.savepoint.downstream_first`)."""
    nodes = [{"id": f"q/{n}", "uid": n} for n in ("sum", "process", "window")]
    chain = [
        {"source": "source:in", "target": "q/sum"},
        {"source": "q/sum", "target": "q/map"},
        {"source": "q/map", "target": "q/process"},
        {"source": "q/process", "target": "q/window"},
        {"source": "q/window", "target": "sink:out"},
    ]
    found = downstream_first(nodes, chain)
    assert found is not None and [n["uid"] for n in found] == ["window", "process", "sum"]
    branches = [
        {"source": "source:in", "target": "q/sum"},
        {"source": "source:in", "target": "q/process"},
        {"source": "q/sum", "target": "q/window"},
        {"source": "q/process", "target": "q/window"},
    ]
    assert downstream_first(nodes, branches) is None
