"""Sinks sharing a stateful operator are written by one query, split at one fork into Python-only branches."""

from __future__ import annotations

import pytest

from ethereal_kafka.api import (
    GraphError,
    OutputTag,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
)
from ethereal_kafka.api import WatermarkStrategy as W
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.plan.sink_groups import group_sinks

SOURCES = {
    "s": KafkaSourceConfig.from_properties({"bootstrap.servers": "127.0.0.1:1", "topics": "t", "name": "s"}),
}


def _windowed(env: StreamExecutionEnvironment, late: OutputTag):  # type: ignore[no-untyped-def]
    return (
        env.from_source("s")
        .assign_timestamps_and_watermarks(W.for_monotonous_timestamps())
        .key_by("k")
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .side_output_late_data(late)
        .count()
    )


def test_a_window_and_its_late_data_are_one_query_split_after_the_window() -> None:
    env = StreamExecutionEnvironment()
    late = OutputTag("late")
    counts = _windowed(env, late)
    counts.sink_to("counts")
    counts.get_side_output(late).map(lambda e: e).sink_to("late")
    (plan,) = group_sinks(env.graph(), SOURCES)
    assert plan.name == "counts+late"
    assert type(plan.fork).__name__ == "WindowNode"
    main, side = plan.branches
    assert (main.tag, len(main.ops)) == (None, 0)
    assert (side.tag, len(side.ops)) == ("late", 1)
    assert plan.sources["s"].group == "ethereal-kafka"  # only this query reads the source


def test_sinks_sharing_only_stateless_work_get_their_own_queries_and_groups() -> None:
    env = StreamExecutionEnvironment()
    parsed = env.from_source("s").map(lambda e: e)
    parsed.sink_to("a")
    parsed.filter(lambda e: True).sink_to("b")
    plans = group_sinks(env.graph(), SOURCES)
    assert [p.name for p in plans] == ["a", "b"]
    assert [p.fork for p in plans] == [None, None]
    assert [p.sources["s"].group for p in plans] == ["ethereal-kafka.a", "ethereal-kafka.b"]


def test_a_source_a_dataframe_query_reads_too_gets_a_group_per_query() -> None:
    """The graph's one query reads `s` alone, until a DataFrame query of the job reads it too (`also_read`)."""
    env = StreamExecutionEnvironment()
    env.from_source("s").map(lambda e: e).sink_to("a")
    graph = env.graph()
    alone = group_sinks(graph, SOURCES)
    assert [sorted(p.sources) for p in alone] == [["s"]]  # one query of the graph reads `s`
    assert [p.sources["s"].group for p in alone] == ["ethereal-kafka"]
    shared = group_sinks(graph, SOURCES, also_read={"s": 1})
    assert [p.sources["s"].group for p in shared] == ["ethereal-kafka.a"]


def test_a_dataframe_pipeline_is_a_function_and_may_stand_alone() -> None:
    env = StreamExecutionEnvironment()
    with pytest.raises(GraphError, match="add_dataframe_pipeline"):
        env.add_dataframe_pipeline("module:function")  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="writes no stream to a sink"):
        env.graph()

    def frames(sources):  # type: ignore[no-untyped-def]
        return {}

    env.add_dataframe_pipeline(frames)
    assert env.graph().sinks == () and env.dataframe_pipelines == (frames,)


def test_a_stateful_operator_below_the_split_is_refused() -> None:
    env = StreamExecutionEnvironment()
    late = OutputTag("late")
    counts = _windowed(env, late)
    counts.sink_to("counts")
    counts.key_by("k").sum("count").sink_to("totals")
    with pytest.raises(GraphError, match="below the split"):
        group_sinks(env.graph(), SOURCES)
