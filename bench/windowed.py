"""Windowed jobs end to end, exactly-once: a Spark-native window and a framework window, records/s and peak memory.

    .venv/bin/python bench/windowed.py --lines 60000 --clicks 30000

Runs the two window examples as a user would (`ethereal-kafka run JOB --available-now`, local[2], exactly-once,
2 input partitions, 2 sink tasks) on fresh topics and checkpoints:

- `wordcount` — `examples/wordcount.py`: lines → words (Spark SQL) → tumbling 10 s counts per word, on Spark's
  native window aggregation (input: `--lines` lines, ~5.5 words each, 10 ms of event time apart);
- `sessions` — `examples/sessions.py`: clicks → per-user session windows (gap 30 s, max 10 min) with a Python
  AggregateFunction, allowed lateness and a late-data side output, on the framework's window operator (input:
  `--clicks` clicks).

Reported per job: input records/s over the whole run (Spark start included) and over the epochs only (first epoch
planned → last epoch committed, from the query's checkpoint), epochs, output records, and the peak RSS of the
process tree (the run's driver, Spark JVM and Python workers; the broker runs outside it). Writes
bench/results/windowed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MemorySampler, bench_broker, query_epochs, write_result

from ethereal_kafka.connectors.kafka.topics import create_topic, produce, read_all
from ethereal_kafka.examples import sessions, wordcount

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "connectors" / "examples"
#: Record timestamps far from the broker's clock must not be deleted by retention during the run.
KEEP = {"retention.ms": "-1"}


def feed_lines(bootstrap: str, topic: str, count: int, start_ms: int) -> None:
    """`count` lines over 2 partitions, record timestamps 10 ms apart."""
    lines = wordcount.lines(count)
    for partition in (0, 1):
        mine = list(range(partition, count, 2))
        produce(
            bootstrap,
            topic,
            [(None, lines[i].encode()) for i in mine],
            partition=partition,
            timestamps_ms=[start_ms + 10 * i for i in mine],
        )


def feed_clicks(bootstrap: str, topic: str, count: int, start_ms: int) -> None:
    """`count` clicks over 2 partitions (a user's clicks stay in one partition)."""
    by_partition: dict[int, list[tuple[bytes, bytes]]] = {0: [], 1: []}
    for click in sessions.clicks(count, users=200, start_ms=start_ms):
        by_partition[int(click["user"][1:]) % 2].append((click["user"].encode(), json.dumps(click).encode()))
    for partition, records in by_partition.items():
        produce(bootstrap, topic, records, partition=partition)


def run_job(job: str, env: dict[str, str], state: Path) -> dict[str, object]:
    """Run one example job to the end of its input; wall time, epoch-only time, epochs, peak RSS."""
    with MemorySampler() as memory:
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "ethereal_kafka.cli", "run", str(EXAMPLES / job), "--available-now"],
            env={**os.environ, **env, "ETHEREAL_KAFKA_STATE": str(state)},
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"{job} failed:\n{done.stderr[-3000:]}")
    epochs, first, last = query_epochs(state / "checkpoint")
    epochs_s = last - first
    return {
        "wall_s": round(wall, 1),
        "epochs_s": round(epochs_s, 1),
        "epochs": epochs,
        "peak_rss_mb": round(memory.peak_total / 2**20),
        "peak_rss_mb_by_kind": {k: round(v / 2**20) for k, v in memory.peak_by_kind.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=60_000)
    parser.add_argument("--clicks", type=int, default=30_000)
    args = parser.parse_args()
    start_ms = (int(time.time()) // 60) * 60_000 - 3_600_000
    results: dict[str, object] = {}
    with bench_broker() as bootstrap:
        stamp = int(time.time())
        topics = {
            name: create_topic(bootstrap, f"bench-{name}-{stamp}", 2, KEEP)
            for name in ("lines", "counts", "clicks", "sessions", "late")
        }
        feed_lines(bootstrap, topics["lines"], args.lines, start_ms)
        feed_clicks(bootstrap, topics["clicks"], args.clicks, start_ms)
        common = {"ETHEREAL_KAFKA_BOOTSTRAP": bootstrap}
        jobs = {
            "wordcount": (
                "wordcount-job.properties",
                {"WORDCOUNT_INPUT_TOPIC": topics["lines"], "WORDCOUNT_OUTPUT_TOPIC": topics["counts"]},
                args.lines,
                ("counts",),
                "native",
            ),
            "sessions": (
                "sessions-job.properties",
                {
                    "SESSIONS_INPUT_TOPIC": topics["clicks"],
                    "SESSIONS_OUTPUT_TOPIC": topics["sessions"],
                    "SESSIONS_LATE_TOPIC": topics["late"],
                },
                args.clicks,
                ("sessions", "late"),
                "framework",
            ),
        }
        for name, (job, env, records, outputs, runs_on) in jobs.items():
            state = Path(tempfile.mkdtemp(prefix=f"ek-bench-{name}-"))
            figures = run_job(job, {**common, **env}, state)
            written = {
                o: len(read_all(bootstrap, topics[o], "read_committed", timeout_s=60)) for o in outputs
            }
            results[name] = {
                "window": runs_on,
                "input_records": records,
                "records_per_s_wall": round(records / float(figures["wall_s"])),  # type: ignore[arg-type]
                "records_per_s_epochs": round(records / float(figures["epochs_s"])),  # type: ignore[arg-type]
                **figures,
                "output_records": written,
            }
            print(name, json.dumps(results[name]))
    results["load_average_1m_at_end"] = round(
        os.getloadavg()[0], 1
    )  # the machine may be shared: read figures with it
    path = write_result("windowed", results)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
