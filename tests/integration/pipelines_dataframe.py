"""DataFrame pipelines of the DataFrame-pipeline tests (importable by the job's Python workers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def two_copies(sources: Mapping[str, DataFrame]) -> dict[str, DataFrame]:
    """One source written unchanged to two sinks: two partition-preserving queries reading one source."""
    (frame,) = sources.values()
    rows = frame.select("key", "value")
    return {"a": rows, "b": rows}


def one_sink_per_source(sources: Mapping[str, DataFrame]) -> dict[str, DataFrame]:
    """Each of two sources written to its own sink: each query reads one of the job's two sources."""
    return {"a": sources["orders"].select("key", "value"), "b": sources["customers"].select("key", "value")}
