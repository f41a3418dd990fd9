"""The read path alone: records per CPU-second from a Kafka topic into decoded columns, ethereal-kafka's Python
source reader against Spark's JVM Kafka source.

    nice -n 19 .venv/bin/python bench/reader.py --records 300000

Writes `--records` Nexmark bids (bench/nexmark_model.py, JSON, one partition) to a fresh topic, then reads the whole
partition `--repeats` times with each reader and reports the median records per CPU-second (one core):

- `ek`: what a source task of ethereal-kafka runs (`KafkaStreamReader.read` without Spark): the range reader's
  `consume` loop (`range_reader.read_messages`), the Kafka columns as Arrow (`messages_to_batch`) and the JSON
  decode into the bid's fields (`decoding.RecordDecoder`), each step timed with this process's CPU clock;
- `spark-jvm`: Spark's JVM Kafka source in a batch query on local[1]: `format("kafka")`, `from_json` with the bid's
  schema, written to the `noop` sink; the CPU of Spark's JVM over the query (`--jvm` off to skip it).

Writes bench/results/reader.json.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nexmark_model as model
import peers_spark
from common import bench_broker, uptime, write_result
from confluent_kafka import Producer

from ethereal_kafka.broker.jars import cache_home
from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.clients import consumer_config
from ethereal_kafka.connectors.kafka.decoding import SourceLayout
from ethereal_kafka.connectors.kafka.range_reader import messages_to_batch, read_messages
from ethereal_kafka.connectors.kafka.topics import create_topic


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def feed(bootstrap: str, topic: str, records: int) -> None:
    """`records` bids into partition 0, event times ending an hour ago."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    base = int(time.time() * 1000) - 3_600_000 - records
    for bid in model.records("bids", records, base_ms=base):
        while True:
            try:
                producer.produce(topic, model.value("bids", bid), partition=0, timestamp=bid["date_time"])
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise SystemExit("the input was not fully written")


def ek_reader(bootstrap: str, topic: str, records: int, repeats: int) -> dict[str, Any]:
    """Records per CPU-second of each step of the Python source reader, median over `repeats` reads."""
    config = KafkaSourceConfig.from_properties(
        {
            "connector.class": "kafka-source",
            "name": "bids",
            "bootstrap.servers": bootstrap,
            "topics": topic,
            "value.format": "json",
            "value.schema": model.SCHEMAS["bids"],
        },
        source="bench/reader.py",
    )
    layout = SourceLayout.from_config(config)
    conf = consumer_config(bootstrap, "reader-bench.reader", config.isolation_level, config.passthrough)
    steps: dict[str, list[float]] = {"consume": [], "arrow": [], "decode": [], "all": []}
    for _ in range(repeats + 1):  # the first read warms up imports and the cached consumer
        began = _cpu()
        chunks = list(read_messages(conf, topic, 0, 0, records, config.batch_size, 60_000))
        consumed = _cpu()
        batches = [messages_to_batch(chunk) for chunk in chunks]
        arrow = _cpu()
        decoder = layout.build()
        rows = sum(decoder.decode(batch).num_rows for batch in batches)
        decoded = _cpu()
        assert rows == records, (rows, records)
        for step, seconds in (
            ("consume", consumed - began),
            ("arrow", arrow - consumed),
            ("decode", decoded - arrow),
            ("all", decoded - began),
        ):
            steps[step].append(records / max(seconds, 1e-9))
    return {step: round(statistics.median(values[1:])) for step, values in steps.items()}


def jvm_reader(bootstrap: str, topic: str, records: int, repeats: int) -> dict[str, Any]:
    """Records per CPU-second of Spark's JVM Kafka source with `from_json`, median over `repeats` queries."""
    import psutil
    import pyspark

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    _, jars = peers_spark.connector_jars(cache_home(), pyspark.__version__)
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    try:
        jvm = next(p for p in psutil.Process().children(recursive=True) if p.name().startswith("java"))
        frame = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
        )
        bids = frame.select(F.from_json(F.col("value").cast("string"), model.SCHEMAS["bids"]).alias("e"))
        rates = []
        for _ in range(repeats + 1):
            times = jvm.cpu_times()
            began = times.user + times.system
            bids.select("e.*").write.format("noop").mode("overwrite").save()
            times = jvm.cpu_times()
            rates.append(records / max(times.user + times.system - began, 1e-9))
        return {"all": round(statistics.median(rates[1:]))}
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--jvm", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    before = uptime()
    with bench_broker() as bootstrap:
        topic = create_topic(bootstrap, f"reader-{int(time.time())}", 1)
        feed(bootstrap, topic, args.records)
        result: dict[str, Any] = {"ek": ek_reader(bootstrap, topic, args.records, args.repeats)}
        print(f"ek (records per CPU-s, one core): {result['ek']}", flush=True)
        if args.jvm:
            result["spark-jvm"] = jvm_reader(bootstrap, topic, args.records, args.repeats)
            print(f"spark-jvm (records per CPU-s of the JVM): {result['spark-jvm']}", flush=True)
    path = write_result(
        "reader", {"uptime_before": before, "records": args.records, "repeats": args.repeats, **result}
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
