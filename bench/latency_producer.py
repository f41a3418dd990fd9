"""The paced input of bench/latency.py: JSON bids at a steady rate, each carrying the time it was produced.

    .venv/bin/python bench/latency_producer.py --bootstrap HOST:PORT --topic IN --rate 10000 --seconds 60

Runs in a process of its own so that pacing does not compete with the bench's reader for one interpreter. Bid i
(bench/peers.py's `bid`) goes to partition i % partitions, keyed by its auction; its `date_time` field and its record
timestamp are both the wall-clock time (ms) of the `produce()` call. Records are due at `i / rate` seconds from the
start; a producer behind schedule writes what is due at once (and says how far behind it fell). The producer is
idempotent with `acks=all` and `linger.ms=5`, as a latency-minded producer would be. Prints one JSON line at the end:
records, seconds, the achieved rate, the first and last produce times and the largest lag behind schedule.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer
from peers import bid


def pace(bootstrap: str, topic: str, rate: float, seconds: float, partitions: int) -> dict[str, float]:
    """Produce `rate * seconds` bids at `rate` per second; returns what the module docstring says is printed."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True}
    )
    total = int(rate * seconds)
    began = time.monotonic()
    first_ms = last_ms = 0
    sent, behind = 0, 0.0
    while sent < total:
        elapsed = time.monotonic() - began
        due = min(total, int(elapsed * rate) + 1)
        behind = max(behind, elapsed - sent / rate)
        while sent < due:
            record = bid(sent)
            now_ms = time.time_ns() // 1_000_000
            record["date_time"] = now_ms
            value = json.dumps(record, separators=(",", ":")).encode()
            try:
                producer.produce(
                    topic,
                    value,
                    str(record["auction"]).encode(),
                    partition=sent % partitions,
                    timestamp=now_ms,
                )
            except BufferError:
                producer.poll(0.01)
                continue
            first_ms = first_ms or now_ms
            last_ms = now_ms
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, began + sent / rate - time.monotonic()))
    if producer.flush(60):
        raise SystemExit("the paced input was not fully written")
    span = max(1, last_ms - first_ms) / 1000
    return {
        "records": sent,
        "seconds": round(span, 2),
        "rate": round(sent / span),
        "first_ms": first_ms,
        "last_ms": last_ms,
        "most_behind_s": round(behind, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rate", type=float, default=10_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(pace(args.bootstrap, args.topic, args.rate, args.seconds, args.partitions)), flush=True)


if __name__ == "__main__":
    main()
