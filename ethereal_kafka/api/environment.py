"""`StreamExecutionEnvironment`: where a DataStream pipeline starts (sources) and ends (sinks).

Two ways to run a pipeline:

- As a job's pipeline function: `pipeline=my_jobs.orders:build` in the job file, with `def build(env): ...`;
  `ethereal-kafka run job.properties` creates the environment from the job file, calls `build(env)`, compiles the
  graph and runs it under the checkpoint coordinator.
- As a script: `env = StreamExecutionEnvironment.from_job_file("job.properties")`, build the graph, then
  `env.execute()` (the same runner, in this process).

Sources and sinks are the connector files the job file names; streams refer to them by connector `name`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ethereal_kafka.api import graph as g
from ethereal_kafka.api.datastream import DataStream, N
from ethereal_kafka.api.errors import GraphError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ethereal_kafka.config.connectors import KafkaSourceConfig
    from ethereal_kafka.config.job import LoadedJob

#: A DataFrame pipeline added to a DataStream job (`add_dataframe_pipeline`): `{source name: streaming DataFrame}`
#: in, `{sink name: DataFrame}` out.
FramePipeline = Callable[[Mapping[str, "DataFrame"]], Mapping[str, "DataFrame"]]

#: The entry-point group an executor registers in (`pyproject.toml`: the runtime's runner registers as "local").
EXECUTORS_GROUP = "ethereal_kafka.executors"


def find_executor(name: str = "local") -> Callable[..., int]:
    """The executor registered as `name`: called as `executor(job_path, available_now=..., graph_builder=...)`,
    it runs the job with the graph the builder puts on the environment it is given, and returns the exit code.

    The API sits below the runtime that runs its graphs, so `execute()` finds the runner the way Flink's
    environment finds its `PipelineExecutorFactory`: by a registration (a package entry point), not an import.

    Raises:
        GraphError: no executor is registered under `name` (the package is not installed: `pip install -e .`).
    """
    from importlib.metadata import entry_points

    found = entry_points(group=EXECUTORS_GROUP, name=name)
    if not found:
        raise GraphError(
            f"no ethereal-kafka executor named {name!r} is registered (entry point group {EXECUTORS_GROUP}): "
            "install the package (pip install -e .) to run a graph with execute()"
        )
    executor: Callable[..., int] = next(iter(found)).load()
    return executor


class StreamExecutionEnvironment:
    """Collects the job graph of one pipeline.

    Attributes:
        job: The loaded job file (connectors, checkpoint, guarantee), or None for a graph built without one (unit
            tests of a pipeline's shape).
    """

    def __init__(
        self, job: LoadedJob | None = None, sources: Mapping[str, KafkaSourceConfig] | None = None
    ) -> None:
        self.job = job
        self.sources: Mapping[str, KafkaSourceConfig] = (
            sources if sources is not None else (job.sources if job is not None else {})
        )
        self._nodes: list[g.Node] = []
        self._sinks: list[g.SinkNode] = []
        self._source_nodes: dict[str, g.SourceNode] = {}
        self._names: dict[int, str] = {}
        self._uids: dict[int, str] = {}
        self._frame_pipelines: list[FramePipeline] = []

    @classmethod
    def from_job_file(cls, path: str | Path) -> StreamExecutionEnvironment:
        """An environment for the job file at `path` (its connectors are loaded and validated).

        Raises:
            ConfigError: the job file or a connector file is invalid.
        """
        from ethereal_kafka.config.job import load_job

        return cls(load_job(path))

    @classmethod
    def for_job(
        cls, job: LoadedJob, sources: Mapping[str, KafkaSourceConfig] | None = None
    ) -> StreamExecutionEnvironment:
        """The environment the runner hands to a pipeline function (`sources` as the runner adjusted them)."""
        return cls(job, sources)

    # -- graph building (called by DataStream methods) -----------------------------------------------------------
    def add(self, cls: type[N], inputs: tuple[g.Node, ...], **attrs: Any) -> N:
        """Append a node of type `cls` reading `inputs`; returns it."""
        for node in inputs:
            if node not in self._nodes:
                raise GraphError(f"{node.label} belongs to another environment")
        node = cls(id=len(self._nodes), inputs=inputs, **attrs)
        self._nodes.append(node)
        return node

    def from_source(self, name: str) -> DataStream:
        """The stream of the job's source connector `name` (one node per source, however often it is asked for).

        Raises:
            GraphError: the job has no such source.
        """
        if self.job is not None and name not in self.sources:
            raise GraphError(
                f"the job has no source named {name!r} (sources: {', '.join(self.sources) or 'none'})"
            )
        node = self._source_nodes.get(name)
        if node is None:
            node = self._source_nodes[name] = self.add(g.SourceNode, (), source=name)
        return DataStream(self, node)

    def add_sink(self, node: g.Node, sink: str) -> None:
        """Write `node`'s stream to the job's sink connector `sink`.

        Raises:
            GraphError: the job has no such sink, or it is already written by another stream.
        """
        if self.job is not None and sink not in self.job.sinks:
            raise GraphError(
                f"the job has no sink named {sink!r} (sinks: {', '.join(self.job.sinks) or 'none'})"
            )
        if any(s.sink == sink for s in self._sinks):
            raise GraphError(f"sink {sink!r} is written by two streams; union them first")
        self._sinks.append(self.add(g.SinkNode, (node,), sink=sink))

    def add_dataframe_pipeline(self, function: FramePipeline) -> None:
        """Run DataFrame (or Spark SQL) queries in this job beside its DataStream ones, as Flink runs Table API
        statements and DataStream pipelines in one job.

        `function` is a DataFrame pipeline function: the runner calls it with `{source name: streaming DataFrame}`
        (the job's sources, decoded as their files say) and it returns `{sink name: DataFrame}`. Each returned
        frame is a query of its own writing that sink, under the job's guarantee, exactly as in a job whose
        `pipeline=` is a DataFrame function: the same checkpoint, transactions, markers and restarts as the
        job's other queries. A source read by several queries (DataStream or DataFrame) is read by each with a
        consumer group of its own (`<group>.<query>`); the function may then be called once per such query.

        Raises:
            GraphError: `function` is not callable (what it returns is checked when the job is planned: a sink
                the job lacks, or one that a stream or another pipeline already writes).
        """
        if not callable(function):
            raise GraphError(f"add_dataframe_pipeline({function!r}): expected a function(sources) -> dict")
        self._frame_pipelines.append(function)

    @property
    def dataframe_pipelines(self) -> tuple[FramePipeline, ...]:
        """The DataFrame pipeline functions added with `add_dataframe_pipeline`, in order."""
        return tuple(self._frame_pipelines)

    def name_node(self, node: g.Node, name: str) -> None:
        """Give `node` a display name (`DataStream.name`); a later call replaces it.

        Raises:
            GraphError: the name is empty or spans lines.
        """
        if not isinstance(name, str) or not name.strip() or "\n" in name or "'" in name:
            raise GraphError(f"{node.label}: name({name!r}): a name is one line of text without quotes")
        self._check_owned(node)
        self._names[node.id] = name

    def uid_node(self, node: g.Node, uid: str) -> None:
        """Give `node` a stable id (`DataStream.uid`); a later call replaces it.

        Raises:
            GraphError: the uid is malformed, or another operator of the job already has it.
        """
        if not isinstance(uid, str) or not g.UID_PATTERN.match(uid):
            raise GraphError(
                f"{node.label}: uid({uid!r}): a uid is 1-120 letters, digits or . _ : @ / # - (no spaces)"
            )
        self._check_owned(node)
        for other, taken in self._uids.items():
            if taken == uid and other != node.id:
                raise GraphError(
                    f"uid {uid!r} is given to two operators, {self._nodes[other].ref.auto} and "
                    f"{node.ref.auto}: uids must be unique within a job"
                )
        self._uids[node.id] = uid

    def _check_owned(self, node: g.Node) -> None:
        if node not in self._nodes:
            raise GraphError(f"{node.label} belongs to another environment")

    def graph(self) -> g.JobGraph:
        """The graph built so far, each node carrying the name and uid given to it.

        Raises:
            GraphError: no stream is written to a sink, and no DataFrame pipeline was added.
        """
        if not self._sinks and not self._frame_pipelines:
            raise GraphError("the pipeline writes no stream to a sink (call stream.sink_to(name))")
        if not self._names and not self._uids:
            return g.JobGraph(tuple(self._nodes), tuple(self._sinks))
        # Nodes are frozen and read their inputs, so a name given after a downstream node was added is applied by
        # rebuilding the nodes in order (ids, inputs and everything else unchanged).
        rebuilt: dict[int, g.Node] = {}
        for node in self._nodes:
            rebuilt[node.id] = dataclasses.replace(
                node,
                inputs=tuple(rebuilt[i.id] for i in node.inputs),
                name=self._names.get(node.id, node.name),
                uid=self._uids.get(node.id, node.uid),
            )
        nodes = tuple(rebuilt[n.id] for n in self._nodes)
        sinks = tuple(rebuilt[s.id] for s in self._sinks)
        return g.JobGraph(nodes, sinks)  # type: ignore[arg-type]

    # -- running -------------------------------------------------------------------------------------------------
    def execute(self, available_now: bool = False) -> int:
        """Run this graph as the job (script style): until SIGTERM/SIGINT, or until the input is consumed with
        `available_now`. Returns the exit code.

        Raises:
            GraphError: the environment has no job file (use `from_job_file`).
        """
        if self.job is None:
            raise GraphError(
                "execute() needs an environment made by StreamExecutionEnvironment.from_job_file"
            )
        graph, frames = self.graph(), self.dataframe_pipelines
        builder: Callable[[StreamExecutionEnvironment], None] = lambda env: env._adopt(graph, frames)  # noqa: E731
        return find_executor()(self.job.path, available_now=available_now, graph_builder=builder)

    def _adopt(self, graph: g.JobGraph, frames: tuple[FramePipeline, ...] = ()) -> None:
        """Take over a graph (and DataFrame pipelines) built by another environment of the same job (used by
        `execute`)."""
        self._nodes = list(graph.nodes)
        self._sinks = list(graph.sinks)
        self._names, self._uids = {}, {}
        self._frame_pipelines = list(frames)
