"""Exactly-once vs at-least-once throughput on the same stateless job (the `eos:stateless` example).

    .venv/bin/python bench/eos_vs_alo.py --records 300000

Feeds one input topic, then runs `ethereal-kafka run JOB --available-now` once per guarantee into a fresh output
topic, timing each run from the first epoch to the last (Spark start-up excluded, taken from the checkpoint history),
and checks the exactly-once output against the plain-Python reference. Writes bench/results/eos-vs-alo.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bench_broker, percentiles, write_result

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.connectors.kafka.topics import create_topic
from ethereal_kafka.examples import eos
from ethereal_kafka.testing.crash import compare
from tests.integration.eos_helpers import feed, output, pairs, write_job


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-records-per-epoch", type=int, default=50_000)
    args = parser.parse_args()
    with bench_broker() as bootstrap:
        stamp = int(time.time())
        src = create_topic(bootstrap, f"eos-bench-in-{stamp}", args.partitions)
        inputs = eos.events(args.records)
        feed(bootstrap, src, inputs, args.partitions)
        results: dict[str, object] = {"records": args.records, "partitions": args.partitions}
        for guarantee in ("at-least-once", "exactly-once"):
            dst = create_topic(bootstrap, f"eos-bench-out-{guarantee}-{stamp}", args.partitions)
            folder = Path(tempfile.mkdtemp(prefix=f"ek-bench-{guarantee}-"))
            files = write_job(
                folder,
                bootstrap,
                src,
                dst,
                "ethereal_kafka.examples.eos:stateless",
                guarantee=guarantee,
                max_records=args.max_records_per_epoch,
            )
            began = time.monotonic()
            subprocess.run(
                [sys.executable, "-m", "ethereal_kafka.cli", "run", str(files.job), "--available-now"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wall = time.monotonic() - began
            with CheckpointHistory(files.app_id, read_only=True) as history:
                epochs = [r for r in history.records() if r.outcome == "committed"]
            first = min(r.started_ms for r in epochs)
            last = max(r.started_ms + r.duration_ms for r in epochs)
            written = output(bootstrap, dst)
            cmp = compare(eos.stateless_reference(inputs), pairs(written))
            results[guarantee] = {
                "records_per_s": round(args.records / ((last - first) / 1000)),
                "epochs": len(epochs),
                "epoch_ms": percentiles([float(r.duration_ms) for r in epochs]),
                "process_wall_s": round(wall, 1),
                "output": cmp.records,
                "duplicates": cmp.duplicates,
                "lost": cmp.lost,
            }
            print(guarantee, json.dumps(results[guarantee]))
        path = write_result("eos-vs-alo", results)
        print(f"written to {path}")


if __name__ == "__main__":
    main()
