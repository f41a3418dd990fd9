"""A job's pipeline function and its running queries (see `runtime.pipeline` for how a pipeline is built)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ethereal_kafka.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from ethereal_kafka.runtime.description import RunDescription


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


@dataclass
class RunningJob:
    """The streaming queries of a started job (one per sink), the run's description (`runtime.description`; None
    when the job was started without one), and the autoscaler watching them (if any: an object with `stop()`, see
    `runtime.autoscaler`)."""

    queries: dict[str, StreamingQuery]
    description: RunDescription | None = None
    #: Released by `stop()` when the job took the app itself (`runner.start` without a guard).
    release: Callable[[], None] | None = None
    autoscaler: Any = None

    def close(self) -> None:
        """Stop the run's helpers (the autoscaler); the queries are stopped by `stop()` or the lifecycle."""
        if self.autoscaler is not None:
            self.autoscaler.stop()

    def await_termination(self, timeout_s: float | None = None) -> None:
        """Wait until every query ends (or `timeout_s` passes); re-raises a query's failure."""
        for query in self.queries.values():
            if timeout_s is None:
                query.awaitTermination()
            else:
                query.awaitTermination(int(timeout_s))

    def stop(self) -> None:
        """Stop every query (the current epoch is interrupted; Spark replays it on restart), then let the app go
        when this job took it itself."""
        try:
            for query in self.queries.values():
                query.stop()
        finally:
            if self.release is not None:
                self.release()
