"""A job's pipeline function and its running queries (see `runtime.pipeline` for how a pipeline is built)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ethereal_kafka.errors import ConfigError
from ethereal_kafka.runtime.imports import make_importable, search_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from ethereal_kafka.runtime.description import RunDescription


Pipeline = Callable[[Mapping[str, "DataFrame"]], "DataFrame | Mapping[str, DataFrame]"]


def resolve_pipeline(spec: str, job_file: str | Path | None = None) -> Pipeline:
    """Import `module:function`, looking the module up in the job file's folder, then the working directory, then
    the rest of `sys.path` (`runtime.imports`).

    Called on the driver by the runner (`runtime.transform.dataframe_pipeline`), by the pre-flight checks of
    `validate` and `run` (`runtime.preflight`) and by the offline UI; the module is imported once per process.

    Raises:
        ConfigError: the module is not found, fails to import, or has no such callable; one line naming `job_file`
            (when given) and the folders searched.
    """
    module_name, _, attr = spec.partition(":")
    where = f"{job_file}: " if job_file is not None else ""
    make_importable(job_file)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(f"{exc.name}.")):
            raise ConfigError(
                f"{where}pipeline={spec}: no module {module_name} in {', '.join(search_path(job_file))} "
                "or on PYTHONPATH"
            ) from exc
        raise ConfigError(f"{where}pipeline={spec}: importing {module_name} failed: {exc}") from exc
    except Exception as exc:  # a syntax error or a failing import inside the user's module
        raise ConfigError(
            f"{where}pipeline={spec}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from exc
    function = getattr(module, attr, None)
    if not callable(function):
        origin = getattr(module, "__file__", None) or module_name
        raise ConfigError(f"{where}pipeline={spec}: {origin} has no function {attr}")
    return function


@dataclass
class RunningJob:
    """The streaming queries of a started job (one per sink), the run's description (`runtime.description`; None
    when the job was started without one), and the autoscaler watching them (if any: an object with `stop()`, see
    `runtime.autoscaler`), and the run's epoch gate (`eos.gate.EpochGate`; None when started without one)."""

    queries: dict[str, StreamingQuery]
    description: RunDescription | None = None
    #: Released by `stop()` when the job took the app itself (`runner.start` without a guard).
    release: Callable[[], None] | None = None
    autoscaler: Any = None
    gate: Any = None

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
        """Stop every query (the current epoch is interrupted, and recorded so: `EpochGate.interrupt`; Spark
        replays it on restart), then let the app go when this job took it itself."""
        try:
            if self.gate is not None:
                self.gate.interrupt()
            for query in self.queries.values():
                query.stop()
        finally:
            if self.release is not None:
                self.release()
