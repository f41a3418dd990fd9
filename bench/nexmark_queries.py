"""Nexmark's windowed queries as ethereal-kafka pipelines (`pipeline=nexmark_queries:q5` in a job file).

bench/nexmark.py writes the job files; q0, q1 and q2 are stateless and run as `transform.sql` (`SQL` below). Every
step here is a Spark expression or a Spark-native window or join (docs/operators-windows.md,
docs/operators-joins.md): no Python runs per record. Event time is the Kafka record timestamp (the generator sets it
to the event's `date_time`), with `OUT_OF_ORDER` of bounded out-of-orderness.
"""

from __future__ import annotations

from ethereal_kafka.api import (
    DataStream,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)

#: Must match nexmark_model.OUT_OF_ORDER_MS, WINDOW_MS and SLIDE_MS (the reference answers use those).
OUT_OF_ORDER = Time.seconds(5)
WINDOW = Time.seconds(10)
SLIDE = Time.seconds(2)

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
