"""CPU of an embedded local Spark session with different driver JVM options (the test kit's lean profile).

    .venv/bin/python bench/driver_jvm.py --rounds 2

Each round starts a fresh Python process per option set (alternating their order), which starts a `local[2]`
session the framework's way (`runtime.spark.local_session`, AppCDS archive included) and runs a small mixed
workload: six times a 200,000-row `mapInArrow` through a Python worker, a shuffle and a 100,000-row aggregation. The
figure is the CPU-seconds of that process's whole tree (driver JVM, Python workers), sampled with psutil before
the session stops, next to the session start and the wall time. Writes bench/results/driver-jvm.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from common import write_result

from ethereal_kafka.runtime.jvm import TEST_DRIVER_OPTIONS

PROFILES = {
    "default": "",
    "c1+serial": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "test kit (c1+serial, no verification)": TEST_DRIVER_OPTIONS,
}

_CHILD = r"""
import json, sys, time
import psutil
import pyarrow as pa
import pyarrow.compute as pc
from ethereal_kafka.runtime.spark import local_session

options = sys.argv[1]
began = time.monotonic()
spark = local_session("driver-jvm-bench", conf={"spark.driver.extraJavaOptions": options} if options else {})
started = time.monotonic() - began


def double(batches):
    for batch in batches:
        yield pa.RecordBatch.from_arrays([pc.multiply(batch.column(0), 2)], names=["id"])


seen = {}
me = psutil.Process()


def sample():
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            seen[proc.pid] = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass


for _ in range(6):
    spark.range(200_000).repartition(4).mapInArrow(double, "id long").groupBy("id").count().count()
    spark.range(100_000).selectExpr("id % 7 as k", "id").groupBy("k").sum("id").collect()
    sample()
print(json.dumps({"start_s": started, "wall_s": time.monotonic() - began, "cpu_s": sum(seen.values())}))
spark.stop()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in PROFILES}
    for round_no in range(args.rounds):
        order = list(PROFILES) if round_no % 2 == 0 else list(reversed(PROFILES))
        for name in order:
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, PROFILES[name]], capture_output=True, text=True, check=True
            )
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            runs[name].append(figures)
            print(
                f"round {round_no + 1} {name:10s} start {figures['start_s']:.1f}s "
                f"wall {figures['wall_s']:.1f}s cpu {figures['cpu_s']:.1f}s",
                flush=True,
            )
    summary = {
        name: {key: round(sum(r[key] for r in rs) / len(rs), 2) for key in ("start_s", "wall_s", "cpu_s")}
        for name, rs in runs.items()
    }
    path = write_result(
        "driver-jvm",
        {
            "command": " ".join(sys.argv),
            "profiles": PROFILES,
            "runs": runs,
            "mean": summary,
        },
    )
    print(json.dumps(summary), "->", path)


if __name__ == "__main__":
    main()
