"""Nexmark's windowed queries as ethereal-kafka pipelines (`pipeline=nexmark_queries:q5` in a job file).

bench/nexmark.py writes the job files; q0, q1 and q2 are stateless and run as `transform.sql` (`SQL` below). Two
forms of each windowed query:

- `q5`, `q7`, `q8`, `wc` (the `ek` system): every step a Spark expression or a Spark-native window or join
  (docs/operators-windows.md, docs/operators-joins.md): no Python runs per record besides the connectors.
- `q5_py`, `q7_py`, `q8_py`, `wc_py` (the `ek-py` system): the same queries written with the DataStream API's Python
  functions, as a user coming from Flink's DataStream API would write them (`AggregateFunction` with a
  `ProcessWindowFunction`, a Python join function, `flat_map` and `reduce`); they run on the framework's window
  operator (transformWithState) or with a Python step after a native join. An event-time framework window cannot
  follow another stateful operator in one query (docs/operators-windows.md), so q5 and q7 are one window each over
  a constant key: the accumulator counts per auction (q5) or keeps the highest bids (q7).

Event time is the Kafka record timestamp (the generator sets it to the event's `date_time`), with `OUT_OF_ORDER`
of bounded out-of-orderness.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ethereal_kafka.api import (
    AggregateFunction,
    DataStream,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from ethereal_kafka.api.functions import WindowContext

#: Must match nexmark_model.OUT_OF_ORDER_MS, WINDOW_MS and SLIDE_MS (the reference answers use those).
OUT_OF_ORDER = Time.seconds(5)
WINDOW = Time.seconds(10)
SLIDE = Time.seconds(2)
WINDOW_MS = 10_000

BIDS = "auction, bidder, price, channel, url, date_time, extra"
#: The stateless queries, as the job's `transform.sql` over the `bids` source.
SQL = {
    "q0": f"SELECT {BIDS} FROM bids",
    "q1": "SELECT auction, bidder, price * 0.908D AS price, channel, url, date_time, extra FROM bids",
    "q2": "SELECT auction, price FROM bids WHERE auction % 123 = 0",
}


def _timed(env: StreamExecutionEnvironment, source: str) -> DataStream:
    return env.from_source(source).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(OUT_OF_ORDER)
    )


# -- Spark-native forms -----------------------------------------------------------------------------------------
def q5(env: StreamExecutionEnvironment) -> None:
    """Hot items: per hopping window (10 s, every 2 s), the auctions with the most bids.

    Bids per auction per hopping window (a Spark-native sliding window count), then, per hopping window, the
    largest count and the auctions that have it: a second Spark-native window (tumbling 2 s, keyed by the hopping
    window) over the first one's results, whose event time is their window's last instant, so each hopping window's
    results fall into one 2 s window. Its aggregate keeps the (auction, count) pairs; a filter keeps the top ones.
    """
    counts = (
        _timed(env, "bids")
        .key_by("auction")
        .window(SlidingEventTimeWindows.of(WINDOW, SLIDE))
        .agg("count(1) AS num")
        .select("auction", "num", "window_start AS starttime", "window_end AS endtime")
    )
    (
        counts.key_by(["starttime", "endtime"])
        .window(TumblingEventTimeWindows.of(SLIDE))
        .agg("max(num) AS maxn", "collect_list(named_struct('auction', auction, 'num', num)) AS items")
        .select("starttime", "endtime", "explode(filter(items, i -> i.num = maxn)) AS hot")
        .select("hot.auction AS auction", "hot.num AS num", "starttime", "endtime")
        .sink_to("out")
    )


def q7(env: StreamExecutionEnvironment) -> None:
    """Highest bid: per tumbling 10 s window, the bid(s) with the highest price, found by joining back.

    The maximum price per window (a Spark-native tumbling window over all bids: one constant key), joined back to
    the bids on price = maximum within the same tumbling window (a Spark-native windowed inner join; the maximum's
    event time is its window's last instant, so it falls into the window it was computed from).
    """
    bids = _timed(env, "bids")
    maxima = (
        bids.with_columns(everything="0")
        .key_by("everything")
        .window(TumblingEventTimeWindows.of(WINDOW))
        .agg("max(price) AS maxprice")
        .select("maxprice")
    )
    (
        bids.join(maxima)
        .where("price")
        .equal_to("maxprice")
        .window(TumblingEventTimeWindows.of(WINDOW))
        .apply()
        .select("auction", "price", "bidder", "date_time", "extra")
        .sink_to("out")
    )


def q8(env: StreamExecutionEnvironment) -> None:
    """Monitor new users: persons who opened an auction in the tumbling 10 s window they registered in.

    A Spark-native semi join of persons with auctions on id = seller per tumbling window: each person of a window
    that has one of their auctions, once (Nexmark's query groups the auctions by seller and window, then joins).
    """
    (
        _timed(env, "persons")
        .join(_timed(env, "auctions"), "semi")
        .where("id")
        .equal_to("seller")
        .window(TumblingEventTimeWindows.of(WINDOW))
        .apply()
        .select("id", "name", "window_start AS starttime")
        .sink_to("out")
    )


def wc(env: StreamExecutionEnvironment) -> None:
    """Windowed word count: lines → words (Spark SQL) → count per word per tumbling 10 s window (Spark-native), as
    ethereal_kafka/examples/wordcount.py."""
    (
        env.from_source("lines")
        .select("explode(split(lower(value), '[^a-z0-9]+')) AS word")
        .filter("word <> ''")
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_bounded_out_of_orderness(OUT_OF_ORDER))
        .key_by("word")
        .window(TumblingEventTimeWindows.of(WINDOW))
        .count()
        .select("word", "window_start", "count")
        .sink_to("out")
    )


# -- DataStream forms with Python functions ---------------------------------------------------------------------
Counts = dict[int, int]


class AuctionCounts(AggregateFunction[Counts]):
    """q5: bids per auction in one window."""

    def create_accumulator(self) -> Counts:
        return {}

    def add(self, value: dict[str, Any], accumulator: Counts) -> Counts:
        auction = value["auction"]
        accumulator[auction] = accumulator.get(auction, 0) + 1
        return accumulator

    def get_result(self, accumulator: Counts) -> dict[str, Any]:
        top = max(accumulator.values())
        return {"hot": [(a, n) for a, n in accumulator.items() if n == top]}


class EmitHot(ProcessWindowFunction):
    """q5: one output element per hot auction of the window."""

    def process(
        self, key: Any, context: WindowContext, elements: list[dict[str, Any]]
    ) -> Iterator[dict[str, Any]]:
        for auction, num in elements[0]["hot"]:
            yield {"auction": auction, "num": num}


def q5_py(env: StreamExecutionEnvironment) -> None:
    """q5 with Python functions: one sliding window over all bids (a constant key), an `AggregateFunction` counting
    bids per auction and a `ProcessWindowFunction` emitting the auctions with the most."""
    (
        _timed(env, "bids")
        .key_by(lambda bid: 0, key_type="int")
        .window(SlidingEventTimeWindows.of(WINDOW, SLIDE))
        .aggregate(AuctionCounts(), window_function=EmitHot(), output_type="auction long, num long")
        .select("auction", "num", "window_start AS starttime", "window_end AS endtime")
        .sink_to("out")
    )


Highest = tuple[int, list[dict[str, Any]]]
BID_OUT = ("auction", "price", "bidder", "date_time", "extra")


class HighestBids(AggregateFunction[Highest]):
    """q7: the highest price of a window and the bids that have it."""

    def create_accumulator(self) -> Highest:
        return (-1, [])

    def add(self, value: dict[str, Any], accumulator: Highest) -> Highest:
        price, bids = accumulator
        bid = {f: value[f] for f in BID_OUT}
        if value["price"] > price:
            return (value["price"], [bid])
        if value["price"] == price:
            bids.append(bid)
        return accumulator

    def get_result(self, accumulator: Highest) -> dict[str, Any]:
        return {"bids": accumulator[1]}


class EmitBids(ProcessWindowFunction):
    """q7: the window's highest bids, one element each."""

    def process(
        self, key: Any, context: WindowContext, elements: list[dict[str, Any]]
    ) -> Iterator[dict[str, Any]]:
        yield from elements[0]["bids"]


def q7_py(env: StreamExecutionEnvironment) -> None:
    """q7 with Python functions: one tumbling window over all bids (a constant key), an `AggregateFunction` keeping
    the highest bids and a `ProcessWindowFunction` emitting them (no join back needed)."""
    (
        _timed(env, "bids")
        .key_by(lambda bid: 0, key_type="int")
        .window(TumblingEventTimeWindows.of(WINDOW))
        .aggregate(
            HighestBids(),
            window_function=EmitBids(),
            output_type="auction long, price long, bidder long, date_time long, extra string",
        )
        .select(*BID_OUT)
        .sink_to("out")
    )


def _new_seller(person: dict[str, Any], _auction: None) -> dict[str, Any]:
    at = person["date_time"]
    return {"id": person["id"], "name": person["name"], "starttime": at - at % WINDOW_MS}


def q8_py(env: StreamExecutionEnvironment) -> None:
    """q8 with a Python join function: the windowed semi join of persons with auctions, each match turned into the
    output element by `_new_seller` (window start from the person's time)."""
    (
        _timed(env, "persons")
        .join(_timed(env, "auctions"), "semi")
        .where("id")
        .equal_to("seller")
        .window(TumblingEventTimeWindows.of(WINDOW))
        .apply(_new_seller, output_type="id long, name string, starttime long")
        .sink_to("out")
    )


def _words(line: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for word in line["value"].lower().split():
        yield {"word": word, "count": 1}


def _add_counts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"word": a["word"], "count": a["count"] + b["count"]}


def wc_py(env: StreamExecutionEnvironment) -> None:
    """The word count with Python functions: `flat_map` splits lines into (word, 1), a tumbling window per word
    `reduce`s them."""
    (
        _timed(env, "lines")
        .flat_map(_words, output_type="word string, count long")
        .key_by("word")
        .window(TumblingEventTimeWindows.of(WINDOW))
        .reduce(_add_counts)
        .select("word", "window_start", "count")
        .sink_to("out")
    )
