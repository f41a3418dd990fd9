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


def copy_and_window(sources: Mapping[str, DataFrame]) -> dict[str, DataFrame]:
    """One source read by two queries: `a` stateless (`eos.stateless`), `b` an event-time windowed count with a
    watermark (`eos.windowed_count`: stateful)."""
    from ethereal_kafka.examples import eos

    return {"a": eos.stateless(sources), "b": eos.windowed_count(sources)}


def stateless_shuffled(sources: Mapping[str, DataFrame]) -> DataFrame:
    """`eos.stateless` with an exchange before the sink: the same records, written by a shuffling query."""
    from ethereal_kafka.examples import eos

    return eos.stateless(sources).repartition(3, "key")
