"""Stateless topic→topic throughput, at-least-once: JSON or Avro, N records (default 1M).

    .venv/bin/python bench/throughput.py --format json --records 1000000
    .venv/bin/python bench/throughput.py --format avro --records 1000000

Feeds an input topic, runs source (typed columns) → filter/project → sink (same format) on local[2] Spark until
the input is consumed (availableNow), and reports records/s, epoch durations and the peak RSS of the process tree
(driver, Spark JVM, Python workers; the broker runs outside it). Writes bench/results/throughput-<format>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MemorySampler, bench_broker, percentiles, write_result

from ethereal_kafka.config import KafkaSinkConfig
from ethereal_kafka.connectors.kafka.sink import KafkaSink
from ethereal_kafka.connectors.kafka.topics import create_topic, read_all
from ethereal_kafka.runtime.spark import local_session
from ethereal_kafka.serde import SerdeSpec, build_codec

REPO = Path(__file__).resolve().parents[1]
AVSC = str(REPO / "serde" / "order.avsc")
DDL = "order_id bigint, customer string, amount double"


def feed(bootstrap: str, topic: str, fmt: str, records: int) -> float:
    """Produce `records` orders in the chosen format; returns the seconds it took."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    codec = build_codec(SerdeSpec(field="value", format="avro", schema_file=AVSC)) if fmt == "avro" else None
    began = time.monotonic()
    chunk = 50_000
    for start in range(0, records, chunk):
        orders = [
            {"order_id": i, "customer": f"c{i % 97}", "amount": float(i % 1000) / 10}
            for i in range(start, min(records, start + chunk))
        ]
        if codec is not None:
            values = codec.encode(pa.array(orders, codec.arrow_type()), topic)
        else:
            values = [json.dumps(o, separators=(",", ":")).encode() for o in orders]
        for order, value in zip(orders, values, strict=True):
            while True:
                try:
                    producer.produce(topic, key=str(order["customer"]).encode(), value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    producer.flush(120)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--format", choices=["json", "avro"], default="json")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-records-per-epoch", type=int, default=200_000)
    args = parser.parse_args()

    with bench_broker() as bootstrap:
        suffix = f"{args.format}-{int(time.time())}"
        src = create_topic(bootstrap, f"bench-in-{suffix}", args.partitions)
        dst = create_topic(bootstrap, f"bench-out-{suffix}", args.partitions)
        feed_s = feed(bootstrap, src, args.format, args.records)
        print(f"fed {args.records} {args.format} records in {feed_s:.1f}s")

        serde = {"value.format": args.format}
        serde.update({"value.schema.file": AVSC} if args.format == "avro" else {"value.schema": DDL})
        source = {
            "bootstrap.servers": bootstrap,
            "topics": src,
            "starting.offsets": "earliest",
            "max.records.per.epoch": str(args.max_records_per_epoch),
            **serde,
        }
        sink = KafkaSinkConfig.from_properties(
            {"bootstrap.servers": bootstrap, "topic": dst, "value.column": "*", **serde}
        )
        spark = local_session("ethereal-kafka-bench")
        from pyspark.sql import functions as F

        with MemorySampler() as memory:
            frame = spark.readStream.format("ethereal-kafka").options(**source).load()
            out = frame.where(F.col("amount") >= 0).select(
                F.col("key"), "order_id", "customer", (F.col("amount") * 1.2).alias("amount")
            )
            began = time.monotonic()
            query = (
                out.writeStream.foreachBatch(KafkaSink(sink))
                .option("checkpointLocation", tempfile.mkdtemp(prefix="ek-bench-ckpt-"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            elapsed = time.monotonic() - began
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        epoch_ms = [float(p["durationMs"]["triggerExecution"]) for p in progress]
        processed = sum(int(p["numInputRows"]) for p in progress)
        spark.stop()
        written = len(read_all(bootstrap, dst, "read_uncommitted", timeout_s=120))
        result = {
            "format": args.format,
            "guarantee": "at-least-once",
            "records": args.records,
            "processed": processed,
            "written": written,
            "partitions": args.partitions,
            "seconds": round(elapsed, 2),
            "records_per_s": round(processed / elapsed),
            "epochs": len(progress),
            "epoch_ms": percentiles(epoch_ms),
            "peak_rss_mb": round(memory.peak_total / 2**20),
            "peak_rss_mb_by_kind": {k: round(v / 2**20) for k, v in memory.peak_by_kind.items()},
            "feed_records_per_s": round(args.records / feed_s),
        }
        path = write_result(f"throughput-{args.format}", result)
        print(json.dumps(result, indent=2))
        print(f"written to {path}")
        if written < args.records:
            raise SystemExit(f"only {written} of {args.records} records reached the output topic")


if __name__ == "__main__":
    main()
