"""Nexmark on Spark's own engine, the `spark` system of bench/nexmark.py: Structured Streaming with Spark's JVM
Kafka source and sink, the queries as DataFrame code over `from_json`.

    .venv/bin/python bench/nexmark_spark.py --query q5 --bootstrap HOST:PORT --topics bids=T \\
        --output OUT --checkpoint DIR --jars A.jar,B.jar

What a Spark user would write (local[2], `spark.sql.shuffle.partitions=2`, Spark's default state store,
`trigger(availableNow=True)`): `format("kafka")` in and out, `from_json` with the kind's schema, event time from
`date_time` with a 5 s watermark, Spark's `window()` aggregations and stream-stream joins, `to_json` out. The
plans are the same ones ethereal-kafka builds for its Spark-native forms (bench/nexmark_queries.py), so the
difference between the two is the connectors and the exactly-once protocol. Spark's Kafka sink is at-least-once.
Nothing of ethereal-kafka is imported by the query's process; `--conf KEY=VALUE` adds Spark settings.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nexmark_model as model

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

WATERMARK = f"{model.OUT_OF_ORDER_MS // 1000} seconds"
WINDOW = f"{model.WINDOW_MS // 1000} seconds"
SLIDE = f"{model.SLIDE_MS // 1000} seconds"


def source(spark: SparkSession, bootstrap: str, topic: str, kind: str) -> DataFrame:
    """A kind's topic as rows of its fields, with `ts` (from `date_time`) as watermarked event time; `lines` as
    `value` text with the record timestamp as `ts`."""
    from pyspark.sql import functions as F

    frame = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    if kind == "lines":
        rows = frame.select(F.col("value").cast("string").alias("value"), F.col("timestamp").alias("ts"))
        return rows
    fields = F.from_json(F.col("value").cast("string"), model.SCHEMAS[kind]).alias("e")
    rows = frame.select(fields).select("e.*")
    return rows.withColumn("ts", F.timestamp_millis("date_time")).withWatermark("ts", WATERMARK)


def build(query: str, spark: SparkSession, bootstrap: str, topics: dict[str, str]) -> DataFrame:
    """The query's output rows (the fields of `nexmark_model.OUTPUT_FIELDS[query]`)."""
    from pyspark.sql import functions as F

    if query == "wc":
        lines = source(spark, bootstrap, topics["lines"], "lines")
        word_rows = (
            lines.select(F.explode(F.split(F.lower("value"), "[^a-z0-9]+")).alias("word"), "ts")
            .filter("word <> ''")
            .withWatermark("ts", WATERMARK)
        )
        counts = word_rows.groupBy("word", F.window("ts", WINDOW)).count()
        return counts.select("word", F.col("window.start").alias("window_start"), "count")
    if query == "q8":
        persons = source(spark, bootstrap, topics["persons"], "persons").select(
            "id", "name", F.window("ts", WINDOW).alias("pw")
        )
        auctions = source(spark, bootstrap, topics["auctions"], "auctions").select(
            "seller", F.window("ts", WINDOW).alias("aw")
        )
        joined = persons.join(
            auctions, (F.col("id") == F.col("seller")) & (F.col("pw") == F.col("aw")), "left_semi"
        )
        return joined.select("id", "name", F.col("pw.start").alias("starttime"))
    bids = source(spark, bootstrap, topics["bids"], "bids")
    if query == "q0":
        return bids.select(*model.BID_FIELDS)
    if query == "q1":
        return bids.select(
            *[(F.col(f) * model.EURO).alias(f) if f == "price" else f for f in model.BID_FIELDS]
        )
    if query == "q2":
        return bids.filter(F.col("auction") % model.Q2_MODULUS == 0).select("auction", "price")
    if query == "q5":
        counts = bids.groupBy("auction", F.window("ts", WINDOW, SLIDE)).agg(F.count("*").alias("num"))
        counts = counts.select(
            "auction",
            "num",
            F.col("window.start").alias("starttime"),
            F.col("window.end").alias("endtime"),
            F.window_time("window").alias("wt"),
        )
        hot = counts.groupBy("starttime", "endtime", F.window("wt", SLIDE)).agg(
            F.max("num").alias("maxn"), F.collect_list(F.struct("auction", "num")).alias("items")
        )
        top = hot.select(
            "starttime", "endtime", F.explode(F.expr("filter(items, i -> i.num = maxn)")).alias("h")
        )
        return top.select("h.auction", "h.num", "starttime", "endtime")
    if query == "q7":
        maxima = bids.groupBy(F.window("ts", WINDOW)).agg(F.max("price").alias("maxprice"))
        maxima = maxima.select("maxprice", F.window_time("window").alias("mts")).select(
            "maxprice", F.window("mts", WINDOW).alias("mw")
        )
        windowed = bids.select(*model.BID_FIELDS, F.window("ts", WINDOW).alias("bw"))
        joined = windowed.join(maxima, (F.col("price") == F.col("maxprice")) & (F.col("bw") == F.col("mw")))
        return joined.select("auction", "price", "bidder", "date_time", "extra")
    raise SystemExit(f"unknown query {query}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--query", required=True, choices=list(model.QUERIES))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topics", required=True, help="comma-separated kind=topic")
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument(
        "--jars", required=True, help="comma-separated connector jars (peers_spark.connector_jars)"
    )
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    topics = dict(pair.split("=", 1) for pair in args.topics.split(","))

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(f"nexmark-spark-{args.query}")
        .config("spark.jars", args.jars)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for setting in args.conf:
        key, value = setting.split("=", 1)
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    rows = build(args.query, spark, args.bootstrap, topics)
    out = rows.select(F.to_json(F.struct(*rows.columns)).alias("value"))
    query = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
