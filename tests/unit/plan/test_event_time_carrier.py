"""Which watermarks carry their input's event time across restarts (`plan.event_time.carried_watermarks`)."""

from __future__ import annotations

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.watermarks import WatermarkStrategy
from ethereal_kafka.plan.event_time import carried_watermarks

BOUNDED = WatermarkStrategy.for_bounded_out_of_orderness(5)


def _source(nid: int, name: str) -> g.SourceNode:
    return g.SourceNode(id=nid, inputs=(), source=name)


def test_a_query_with_two_watermarked_inputs_carries_both_by_sources_and_timestamp() -> None:
    a = g.WatermarkNode(id=2, inputs=(_source(0, "orders"),), strategy=BOUNDED)
    b = g.WatermarkNode(
        id=3, inputs=(_source(1, "payments"),), strategy=BOUNDED.with_timestamp_assigner("paid")
    )
    joined = g.UnionNode(id=4, inputs=(b, a))
    assert carried_watermarks((g.SinkNode(id=5, inputs=(joined,), sink="out"),)) == (
        (2, "input:orders@timestamp", 5),
        (3, "input:payments@paid", 5),
    )
    # Built in the other order, after another operator: other node ids, the same keys.
    a = g.WatermarkNode(id=7, inputs=(g.MapNode(id=6, inputs=(_source(0, "orders"),)),), strategy=BOUNDED)
    b = g.WatermarkNode(
        id=3, inputs=(_source(1, "payments"),), strategy=BOUNDED.with_timestamp_assigner("paid")
    )
    joined = g.UnionNode(id=8, inputs=(a, b))
    assert {n: k for n, k, _ in carried_watermarks((g.SinkNode(id=9, inputs=(joined,), sink="out"),))} == {
        7: "input:orders@timestamp",
        3: "input:payments@paid",
    }


def test_a_uid_names_the_watermark_and_look_alikes_are_numbered_in_graph_order() -> None:
    orders = _source(0, "orders")
    a = g.WatermarkNode(id=2, inputs=(orders,), strategy=BOUNDED)
    b = g.WatermarkNode(id=3, inputs=(orders,), strategy=BOUNDED)
    c = g.WatermarkNode(id=4, inputs=(orders,), strategy=BOUNDED, uid="late-orders")
    joined = g.UnionNode(id=5, inputs=(a, b, c))
    assert carried_watermarks((g.SinkNode(id=6, inputs=(joined,), sink="out"),)) == (
        (2, "input:orders@timestamp", 5),
        (3, "input:orders@timestamp#2", 5),
        (4, "uid:late-orders", 5),
    )


def test_one_watermarked_input_or_an_idle_one_carries_nothing() -> None:
    a = g.WatermarkNode(id=1, inputs=(), strategy=BOUNDED)
    idle = g.WatermarkNode(id=2, inputs=(), strategy=BOUNDED.with_idleness(1000))
    assert carried_watermarks((g.SinkNode(id=3, inputs=(a,), sink="out"),)) == ()
    # under the max policy (an input declares idleness) Spark's checkpointed watermark is already exact
    union = g.UnionNode(id=4, inputs=(a, idle))
    assert carried_watermarks((g.SinkNode(id=5, inputs=(union,), sink="out"),)) == ()
    # restoring a savepoint into a new checkpoint, every watermark carries (its first epoch would run with 0)
    assert carried_watermarks((g.SinkNode(id=3, inputs=(a,), sink="out"),), restoring=True) == (
        (1, "input:?@timestamp", 5),
    )
