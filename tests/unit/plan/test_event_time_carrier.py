"""Which watermarks carry their input's event time across restarts (`plan.event_time.carried_watermarks`)."""

from __future__ import annotations

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.watermarks import WatermarkStrategy
from ethereal_kafka.plan.event_time import carried_watermarks

BOUNDED = WatermarkStrategy.for_bounded_out_of_orderness(5)


def test_a_query_with_two_watermarked_inputs_carries_both() -> None:
    a = g.WatermarkNode(id=1, inputs=(), strategy=BOUNDED)
    b = g.WatermarkNode(id=2, inputs=(), strategy=BOUNDED)
    joined = g.UnionNode(id=3, inputs=(b, a))
    assert carried_watermarks((g.SinkNode(id=4, inputs=(joined,), sink="out"),)) == (1, 2)


def test_one_watermarked_input_or_an_idle_one_carries_nothing() -> None:
    a = g.WatermarkNode(id=1, inputs=(), strategy=BOUNDED)
    idle = g.WatermarkNode(id=2, inputs=(), strategy=BOUNDED.with_idleness(1000))
    assert carried_watermarks((g.SinkNode(id=3, inputs=(a,), sink="out"),)) == ()
    # under the max policy (an input declares idleness) Spark's checkpointed watermark is already exact
    union = g.UnionNode(id=4, inputs=(a, idle))
    assert carried_watermarks((g.SinkNode(id=5, inputs=(union,), sink="out"),)) == ()
