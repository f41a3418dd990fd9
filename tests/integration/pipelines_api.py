"""DataStream pipelines used by the API integration tests (importable by the job subprocess and its workers)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from ethereal_kafka.api import StreamExecutionEnvironment, Time, TumblingEventTimeWindows, WatermarkStrategy

WINDOW_MS = 10_000


def _words(element: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"word": w, "seq": element["seq"]} for w in element["text"].split()]


def stateless(env: StreamExecutionEnvironment) -> None:
    """JSON lines -> words (flat_map) -> drop short words (filter) -> upper-case (column expression) -> key."""
    (
        env.from_source("lines")
        .select(F.col("text"), F.col("seq"))
        .flat_map(_words, output_type="word string, seq long")
        .filter(lambda e: len(e["word"]) > 2)
        .with_columns(upper="upper(word)")
        .map(
            lambda e: {"key": e["word"], "word": e["upper"], "seq": e["seq"]},
            "key string, word string, seq long",
        )
        .sink_to("words")
    )


def chained_words(env: StreamExecutionEnvironment) -> None:
    """`stateless` with Python functions and `key_by` only (flat_map, filter, key_by a field, map): a query the
    runner chains into its source's read tasks (`plan.chaining`); each record is keyed by its word (lower case)."""
    (
        env.from_source("lines")
        .flat_map(_words, output_type="word string, seq long")
        .filter(lambda e: len(e["word"]) > 2)
        .key_by("word")
        .map(lambda e: {"word": e["word"].upper(), "seq": e["seq"]}, "word string, seq long")
        .sink_to("words")
    )


def line_lengths(sources: Any) -> dict[str, Any]:
    """A DataFrame pipeline: each line's `seq` and length in characters, keyed by the record's key."""
    lines = sources["lines"]
    value = F.to_json(F.struct("seq", F.length("text").alias("length")))
    return {"lengths": lines.select(F.col("key"), value.alias("value"))}


def stateless_and_lengths(env: StreamExecutionEnvironment) -> None:
    """`stateless` (words) and, beside it in the same job, the DataFrame pipeline `line_lengths` reading the same
    source."""
    stateless(env)
    env.add_dataframe_pipeline(line_lengths)


def lengths_into_words(env: StreamExecutionEnvironment) -> None:
    """`stateless`, plus a DataFrame pipeline that writes the sink `stateless` already writes (refused)."""
    stateless(env)
    env.add_dataframe_pipeline(lambda sources: {"words": line_lengths(sources)["lengths"]})


def counts_two_ways(env: StreamExecutionEnvironment) -> None:
    """A native windowed count written to two sinks by one query: as is, and reshaped by a Python map."""
    counts = (
        env.from_source("lines")
        .select(F.col("text"), F.col("ts"))
        .flat_map(lambda e: [{"word": w, "ts": e["ts"]} for w in e["text"].split()], "word string, ts long")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts")
        )
        .key_by("word")
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .count()
    )
    counts.sink_to("counts")
    counts.map(
        lambda e: {"word": e["word"], "start_ms": int(e["window_start"].timestamp() * 1000), "n": e["count"]},
        "word string, start_ms long, n long",
    ).sink_to("flat")


class _Count:
    """Counts a key's elements; the result's first field decreases, so sorting records by content would reverse
    them: only the operator's emission order keeps them increasing."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: dict[str, Any], accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> dict[str, Any]:
        return {"rev": 1_000_000 - accumulator, "n": accumulator}


def running_counts(env: StreamExecutionEnvironment) -> None:
    """Per key, one update per element (a rolling aggregate), whose content sorts against emission order."""
    (
        env.from_source("lines")
        .select(F.col("key").cast("string").alias("k"), F.col("seq"))
        .key_by("k")
        .aggregate(_Count(), output_type="rev long, n long")
        .sink_to("counts")
    )


def union_in_input_order(env: StreamExecutionEnvironment) -> None:
    """Two sources unioned (a shuffling query without state): each key's records must leave in input order,
    although their first field (`rank`) decreases, so sorting records by content would reverse them."""
    fields = "rank long, user string, seq long"
    left = env.from_source("left").select(F.col("rank"), F.col("user"), F.col("seq"))
    right = env.from_source("right").select(F.col("rank"), F.col("user"), F.col("seq"))
    left.union(right).map(lambda e: dict(e), fields).key_by("user").sink_to("out")
