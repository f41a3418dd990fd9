"""The DataStream API builds the job graph it describes and rejects what cannot run, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ethereal_kafka.api import (
    CountTrigger,
    Duration,
    EventTimeSessionWindows,
    GlobalWindows,
    GraphError,
    OutputTag,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from ethereal_kafka.api import graph as g
from ethereal_kafka.api.windows import TimeWindow


def test_a_pipeline_becomes_nodes_in_order_with_their_inputs() -> None:
    env = StreamExecutionEnvironment()
    late = OutputTag("late")
    counts = (
        env.from_source("words")
        .map(lambda e: e, output_type="word string")
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_bounded_out_of_orderness(Time.seconds(5)))
        .key_by("word")
        .window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .allowed_lateness(Time.seconds(2))
        .side_output_late_data(late)
        .count()
    )
    counts.sink_to("counts")
    counts.get_side_output(late).sink_to("late")
    graph = env.graph()
    kinds = [type(n).__name__ for n in graph.nodes]
    assert kinds == [
        "SourceNode",
        "MapNode",
        "WatermarkNode",
        "KeyByNode",
        "WindowNode",
        "SinkNode",
        "SideOutputNode",
        "SinkNode",
    ]
    window = graph.nodes[4]
    assert isinstance(window, g.WindowNode)
    assert window.allowed_lateness == Duration(2000) and window.late_tag == late
    assert [s.sink for s in graph.sinks] == ["counts", "late"]
    assert all(n.inputs[0].id < n.id for n in graph.nodes if n.inputs)


def test_one_source_node_per_source_and_sinks_written_once() -> None:
    env = StreamExecutionEnvironment()
    a = env.from_source("s")
    b = env.from_source("s")
    assert a.node is b.node
    a.sink_to("out")
    with pytest.raises(GraphError, match="written by two streams"):
        b.map(lambda e: e).sink_to("out")


def test_no_sink_is_an_error() -> None:
    env = StreamExecutionEnvironment()
    env.from_source("s").map(lambda e: e)
    with pytest.raises(GraphError, match="no stream to a sink"):
        env.graph()


def test_bad_arguments_are_refused_with_the_reason() -> None:
    env = StreamExecutionEnvironment()
    stream = env.from_source("s")
    with pytest.raises(GraphError, match="reserved"):
        stream.key_by("__key")
    with pytest.raises(GraphError, match="join kind"):
        stream.join(stream, how="sideways")
    with pytest.raises(GraphError, match="never fires without a trigger"):
        stream.key_by("k").window(GlobalWindows.create()).count()
    with pytest.raises(GraphError, match="output_type"):
        stream.key_by("k").process(object(), side_outputs=[OutputTag("alerts")])
    with pytest.raises(ValueError):
        TumblingEventTimeWindows.of(0)


def test_global_window_with_a_trigger_and_count_windows_are_accepted() -> None:
    env = StreamExecutionEnvironment()
    keyed = env.from_source("s").key_by("k")
    keyed.window(GlobalWindows.create()).trigger(CountTrigger.of(3)).count().sink_to("a")
    keyed.count_window(5).count().sink_to("b")
    windows = [n for n in env.graph().nodes if isinstance(n, g.WindowNode)]
    assert len(windows) == 2 and windows[1].trigger is not None


def test_window_assigners_place_timestamps() -> None:
    assert TumblingEventTimeWindows.of(10_000).assign(12_345) == [TimeWindow(10_000, 20_000)]
    assert TumblingEventTimeWindows.of(10_000, 3_000).assign(12_345) == [TimeWindow(3_000, 13_000)]
    assert SlidingEventTimeWindows.of(10_000, 5_000).assign(12_345) == [
        TimeWindow(5_000, 15_000),
        TimeWindow(10_000, 20_000),
    ]
    assert EventTimeSessionWindows.with_gap(1_000).assign(5) == [TimeWindow(5, 1_005)]
    capped = EventTimeSessionWindows.with_gap(1_000).with_max_length(Duration.of_millis(1_500))
    assert capped.assign(5) == [TimeWindow(5, 1_005)]


def _write_job(folder: Path) -> None:
    """A job file with one source (`orders`) and one sink (`out`) in `folder`."""
    (folder / "src.properties").write_text(
        "connector.class=kafka-source\nname=orders\nbootstrap.servers=127.0.0.1:1\ntopics=t\n"
    )
    (folder / "sink.properties").write_text(
        "connector.class=kafka-sink\nname=out\nbootstrap.servers=127.0.0.1:1\ntopic=o\n"
    )
    (folder / "job.properties").write_text(
        "app.id=a\nsources=src.properties\nsinks=sink.properties\npipeline=m:f\n"
        f"checkpoint.location={folder}/cp\n"
    )


def test_environment_checks_connector_names_against_its_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    _write_job(tmp_path)
    env = StreamExecutionEnvironment.from_job_file(tmp_path / "job.properties")
    with pytest.raises(GraphError, match=r"no source named 'payments' \(sources: orders\)"):
        env.from_source("payments")
    with pytest.raises(GraphError, match=r"no sink named 'x' \(sinks: out\)"):
        env.from_source("orders").sink_to("x")


def test_execute_hands_the_registered_runner_the_job_and_the_graph(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ethereal_kafka.api import environment
    from ethereal_kafka.runtime.runner import run

    # The runtime's runner is what the package registers (the API does not import it).
    assert environment.find_executor() is run
    with pytest.raises(GraphError, match=r"no ethereal-kafka executor named 'cluster'.*pip install -e \."):
        environment.find_executor("cluster")
    _write_job(tmp_path)
    calls = []

    def runner(job_path, available_now, graph_builder):  # type: ignore[no-untyped-def]
        calls.append((job_path, available_now, graph_builder))
        return 7

    monkeypatch.setattr(environment, "find_executor", lambda name="local": runner)
    env = StreamExecutionEnvironment.from_job_file(tmp_path / "job.properties")
    env.from_source("orders").filter(lambda e: True).sink_to("out")
    assert env.execute(available_now=True) == 7
    [(job_path, available_now, builder)] = calls
    assert (job_path, available_now) == (env.job.path, True)  # type: ignore[union-attr]
    # The builder puts the script's graph on the environment the runner creates for the job.
    fresh = StreamExecutionEnvironment.from_job_file(tmp_path / "job.properties")
    builder(fresh)
    assert fresh.graph() == env.graph()
