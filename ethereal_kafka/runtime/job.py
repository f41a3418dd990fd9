"""Run a loaded job on Spark: source DataFrames → the user's pipeline function → sinks.

The pipeline function named by `pipeline=module:function` in the job file is called on the driver as
`function(sources)` with `{source name: streaming DataFrame}` and returns either one DataFrame (written to the only
sink) or `{sink name: DataFrame}`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ethereal_kafka.config.job import LoadedJob
from ethereal_kafka.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


Pipeline = Callable[[Mapping[str, "DataFrame"]], "DataFrame | Mapping[str, DataFrame]"]


def resolve_pipeline(spec: str) -> Pipeline:
    """Import `module:function`.

    Raises:
        ConfigError: the module cannot be imported or has no such callable.
    """
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"pipeline={spec}: cannot import {module_name} ({exc})") from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError(f"pipeline={spec}: {module_name} has no function {attr}")
    return function


def source_frames(spark: SparkSession, loaded: LoadedJob) -> dict[str, DataFrame]:
    """One streaming DataFrame per source connector of the job."""
    return {
        name: spark.readStream.format("ethereal-kafka").options(**conf.to_properties()).load()
        for name, conf in loaded.sources.items()
    }


@dataclass
class RunningJob:
    """The streaming queries of a started job (one per sink)."""

    queries: dict[str, StreamingQuery]

    def await_termination(self, timeout_s: float | None = None) -> None:
        """Wait until every query ends (or `timeout_s` passes); re-raises a query's failure."""
        for query in self.queries.values():
            if timeout_s is None:
                query.awaitTermination()
            else:
                query.awaitTermination(int(timeout_s))

    def stop(self) -> None:
        """Stop every query (the current epoch is interrupted; Spark replays it on restart)."""
        for query in self.queries.values():
            query.stop()


def start_job(spark: SparkSession, loaded: LoadedJob, available_now: bool = False) -> RunningJob:
    """Build the pipeline and start one streaming query per sink.

    Args:
        available_now: Process what the sources hold now, then stop (tests, the demo, backfills).
    """
    from ethereal_kafka.connectors.kafka.sink import KafkaSink

    outputs: Any = resolve_pipeline(loaded.job.pipeline)(source_frames(spark, loaded))
    if not isinstance(outputs, Mapping):
        if len(loaded.sinks) != 1:
            raise ConfigError(
                f"pipeline {loaded.job.pipeline} returned one DataFrame but the job has several sinks"
            )
        outputs = {next(iter(loaded.sinks)): outputs}
    missing = sorted(set(loaded.sinks) - set(outputs))
    extra = sorted(set(outputs) - set(loaded.sinks))
    if missing or extra:
        raise ConfigError(
            f"pipeline outputs {sorted(outputs)} do not match the job's sinks {sorted(loaded.sinks)}"
        )
    queries = {}
    for name, frame in outputs.items():
        writer = (
            frame.writeStream.foreachBatch(KafkaSink(loaded.sinks[name]))
            .queryName(f"{loaded.job.app_id}-{name}")
            .option("checkpointLocation", f"{loaded.job.checkpoint_location}/{name}")
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{loaded.job.trigger_interval_ms} milliseconds")
        queries[name] = writer.start()
    return RunningJob(queries)
