"""Memory over a long backlog (issue 12, target 4: peak RSS of all processes <= 1.0 GB for a stateless job, <= 1.5 GB
for a windowed one; constant, not growing, over a 10M-record backlog).

    nice -n 19 .venv/bin/python bench/memory.py                             # 10M bids, stateless, exactly-once
    nice -n 19 .venv/bin/python bench/memory.py --records 1000000 --lines 0      # a short run, no windowed job
    nice -n 19 .venv/bin/python bench/memory.py --records 0 --lines 300000       # the windowed job only

Stateless: writes `--records` JSON bids (bench/peers.py's input, 2 partitions) as a backlog, then runs the
bench/peers.py map job (exactly-once, the project's defaults, `--ek-setting` adds job settings; `--api datastream`:
the map as a DataStream Python function, which runs chained, bench/peers.py's `ek-eos-py`) over it with
`ethereal-kafka run --available-now`. Windowed (`--lines`, 0 = skipped): the word count example
(connectors/examples/wordcount-job.properties, exactly-once, tumbling 10 s windows on Spark's state store) over
`--lines` lines as bench/windowed.py feeds them.

While a job runs, the RSS of its whole process tree is sampled every second by kind of process (bench/common.py
`process_role`: the driver, Spark's JVM, the Python worker daemon, the Python workers it forks, the Python data
source's streaming source runner, the planners). After it, the job's checkpoint history says when each epoch
committed and how many records it read, which places every sample at a count of records consumed. Reported: the
RSS (total and by kind) while each further `--step` records were being consumed, the peak total with its breakdown,
the largest RSS of each kind, and the growth over the second half of the backlog (least-squares slope of each
kind's RSS against records consumed, MB per 1M records, over the samples taken while the second half was read).
RSS counts pages shared by forked workers once per process, as `ps` shows them; PSS (the same samples) shares them
out, so the PSS total is what the tree holds. The same samples give each kind's CPU-seconds (each process's
largest value; PySpark's daemon ignores SIGCHLD, so its workers are sampled, not read from a parent) and the
tree's CPU-seconds per 1M records, start-up included. The stateless job's output is
checked by id with a read_committed reader (bench/peers.py `OutputWatcher`, running beside the job): lost and
duplicates must be 0 / 0. Writes bench/results/memory.json and prints Markdown tables.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROLES, RoleSampler, bench_broker, conclude, uptime
from peers import PARTITIONS, OutputWatcher, Run, feed, write_ethereal_job, write_ethereal_py_job
from windowed import EXAMPLES, KEEP, feed_lines

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.connectors.kafka.topics import create_topic

MB = 2**20


def consumed_by(app_id: str, since_ms: float) -> list[tuple[float, int]]:
    """(commit time in wall-clock ms, records consumed so far) after each epoch of `app_id` committed since
    `since_ms`, in commit order, from the app's checkpoint history."""
    with CheckpointHistory(app_id, read_only=True) as history:
        epochs = [r for r in history.records() if r.outcome == "committed" and r.started_ms >= since_ms]
    ends = sorted((r.started_ms + r.duration_ms, max(0, r.records_in)) for r in epochs)
    curve, total = [], 0
    for at, records in ends:
        total += records
        curve.append((float(at), total))
    return curve


def _consumed_at(curve: list[tuple[float, int]], at_ms: float) -> int:
    return max((n for t, n in curve if t <= at_ms), default=0)


def _slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x; None for fewer than 3 points or no spread in x."""
    if len(points) < 3:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def _mb(by_role: dict[str, int]) -> dict[str, int]:
    shown = {role: round(by_role[role] / MB) for role in ROLES if role in by_role}
    return {"total": round(sum(by_role.values()) / MB), **shown}


def profile(sampler: RoleSampler, curve: list[tuple[float, int]], records: int, step: int) -> dict[str, Any]:
    """The memory figures of one run (see the module docstring) from its samples and its consumed-records curve.

    The point of the curve at `mark` records is the last sample taken before the epoch that took the consumed count
    to `mark` or beyond committed: the tree while it read those records (for the last mark: before shutdown)."""
    cpu = sampler.cpu_by_role()
    rss = [(_consumed_at(curve, at), by_role) for at, by_role in sampler.samples]
    pss = [(_consumed_at(curve, at), by_role) for at, by_role in sampler.pss_samples]
    steps = []
    for mark in range(step, records + 1, step):
        before = [k for k, (n, _) in enumerate(rss) if n < mark]
        if before:
            steps.append(
                {"consumed": mark, "rss_mb": _mb(rss[before[-1]][1]), "pss_mb": _mb(pss[before[-1]][1])}
            )
    peak = max(rss, key=lambda s: sum(s[1].values()), default=(0, {}))
    peak_pss = max(pss, key=lambda s: sum(s[1].values()), default=(0, {}))
    slopes = {}
    for name, samples in (("rss", rss), ("pss", pss)):
        second_half = [(n / 1e6, by_role) for n, by_role in samples if records / 2 <= n < records]
        for role in ("total", *ROLES):
            points = [
                (x, (sum(by_role.values()) if role == "total" else by_role.get(role, 0)) / MB)
                for x, by_role in second_half
            ]
            slope = _slope(points)
            if slope is not None and (
                role == "total" or any(by_role.get(role) for _, by_role in second_half)
            ):
                slopes[f"{name} {role}"] = round(slope, 1)
    largest = {role: round(max((s[1].get(role, 0) for s in rss), default=0) / MB) for role in ROLES}
    return {
        "samples": len(rss),
        "per_step_mb": steps,
        "peak_rss_mb": _mb(peak[1]),
        "peak_rss_at_consumed": peak[0],
        "peak_pss_mb": _mb(peak_pss[1]),
        "largest_rss_mb_by_kind": {role: v for role, v in largest.items() if v},
        "most_processes_by_kind": sampler.most,
        "cpu_s_by_kind": cpu,
        "cpu_s": round(sum(cpu.values()), 1),
        "cpu_s_per_1m": round(sum(cpu.values()) / max(1, records) * 1e6, 1),
        "second_half_slope_mb_per_1m": slopes,
        "curve": [{"at_ms": round(at), "consumed": n} for at, n in curve],
    }


def run_job(
    argv: list[str], env: dict[str, str], log: Path, timeout_s: float
) -> tuple[RoleSampler, int, float]:
    """Run a job to its end while sampling its tree; returns the sampler, the exit code and the start (wall ms)."""
    began_ms = time.time() * 1000
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True
        )
    sampler = RoleSampler(process.pid, interval_s=1.0)
    try:
        with sampler:
            code = process.wait(timeout_s)
    except BaseException:  # timed out or interrupted: leave no job behind
        os.killpg(process.pid, 9)
        process.wait()
        raise
    return sampler, code, began_ms


def stateless(bootstrap: str, folder: Path, args: argparse.Namespace, stamp: str) -> dict[str, Any]:
    """The stateless exactly-once map job over a `args.records` backlog."""
    source = create_topic(bootstrap, f"memory-in-{stamp}", PARTITIONS)
    output = create_topic(bootstrap, f"memory-out-{stamp}", PARTITIONS)
    feed_s, value_bytes = feed(bootstrap, source, args.records)
    print(f"fed {args.records:,} bids (mean value {value_bytes:.0f} B) in {feed_s:.1f} s", flush=True)
    app_id = f"memory-stateless-{stamp}"
    run = Run(bootstrap, source, args.records, "map", stamp, folder, args.ek_setting)
    if args.api == "datastream":
        job = write_ethereal_py_job(folder / "stateless", run, output, app_id)
    else:
        job = write_ethereal_job(folder / "stateless", run, output, app_id, "exactly-once")
    watcher = OutputWatcher(bootstrap, output, args.records)
    watcher.start()
    argv = [sys.executable, "-m", "ethereal_kafka.cli", "run", str(job), "--available-now"]
    sampler, code, began_ms = run_job(argv, {}, folder / "stateless.log", args.timeout)
    wall = time.time() - began_ms / 1000
    watcher.finish()
    curve = consumed_by(app_id, began_ms)
    lost, duplicates = args.records - watcher.unique, watcher.duplicates()
    return {
        "job": f"stateless map (bench/peers.py, {args.api}), exactly-once",
        "records": args.records,
        "feed_s": round(feed_s, 1),
        "exit_code": code,
        "wall_s": round(wall, 1),
        "epochs": len(curve),
        **profile(sampler, curve, args.records, args.step),
        "output": {
            "unique": watcher.unique,
            "lost": lost,
            "duplicates": duplicates,
            "unexpected": watcher.unexpected,
        },
        "exact": code == 0 and lost == 0 and duplicates == 0 and watcher.unexpected == 0,
    }


def windowed(bootstrap: str, folder: Path, args: argparse.Namespace, stamp: str) -> dict[str, Any]:
    """The word count example (tumbling windows, exactly-once) over `args.lines` lines."""
    lines = create_topic(bootstrap, f"memory-lines-{stamp}", 2, KEEP)
    counts = create_topic(bootstrap, f"memory-counts-{stamp}", 2, KEEP)
    began = time.monotonic()
    # Lines are 10 ms of event time apart: the last one a minute before now, as the broker refuses record
    # timestamps more than an hour ahead of its clock (`message.timestamp.after.max.ms`).
    feed_lines(bootstrap, lines, args.lines, int(time.time() * 1000) - 10 * args.lines - 60_000)
    print(f"fed {args.lines:,} lines in {time.monotonic() - began:.1f} s", flush=True)
    env = {
        "ETHEREAL_KAFKA_BOOTSTRAP": bootstrap,
        "ETHEREAL_KAFKA_STATE": str(folder / "wordcount"),
        "WORDCOUNT_INPUT_TOPIC": lines,
        "WORDCOUNT_OUTPUT_TOPIC": counts,
    }
    argv = [sys.executable, "-m", "ethereal_kafka.cli", "run", str(EXAMPLES / "wordcount-job.properties")]
    sampler, code, began_ms = run_job([*argv, "--available-now"], env, folder / "wordcount.log", args.timeout)
    wall = time.time() - began_ms / 1000
    curve = consumed_by("ethereal-kafka-wordcount", began_ms)
    step = max(1, args.lines // 10)
    return {
        "job": "word count example (tumbling 10 s windows, Spark's state store), exactly-once",
        "records": args.lines,
        "exit_code": code,
        "wall_s": round(wall, 1),
        "epochs": len(curve),
        **profile(sampler, curve, args.lines, step),
        "exact": code == 0,
    }


def markdown(result: dict[str, Any]) -> str:
    """The RSS curve (by kind, per step of records consumed), the PSS total and the growth of one run as Markdown."""
    kinds = [role for role in ROLES if role in result["largest_rss_mb_by_kind"]]
    lines = [
        f"{result['job']}: {result['records']:,} records, {result['epochs']} epochs, {result['wall_s']} s "
        f"({result['records'] / max(result['wall_s'], 0.1):,.0f} records/s with start-up), "
        f"{result['cpu_s']} CPU-s ({result['cpu_s_per_1m']} CPU-s / 1M with start-up; by kind: "
        + ", ".join(f"{k} {v}" for k, v in result["cpu_s_by_kind"].items())
        + ")",
        "",
        "| consumed (up to) | RSS total | PSS total | " + " | ".join(f"{k} (RSS)" for k in kinds) + " |",
        "|---|---|---|" + "---|" * len(kinds),
    ]
    rows = [
        *result["per_step_mb"],
        {"consumed": "peak", "rss_mb": result["peak_rss_mb"], "pss_mb": result["peak_pss_mb"]},
    ]
    for row in rows:
        rss, pss = row["rss_mb"], row["pss_mb"]
        consumed = row["consumed"] if isinstance(row["consumed"], str) else f"{row['consumed']:,}"
        lines.append(
            f"| {consumed} | **{rss['total']} MB** | {pss['total']} MB | "
            + " | ".join(f"{rss.get(k, 0)} MB" for k in kinds)
            + " |"
        )
    slopes = result["second_half_slope_mb_per_1m"]
    lines.append(
        "| slope over the 2nd half (MB / 1M records) | "
        + " | ".join(str(slopes.get(f"{m} {k}", "n/a")) for m, k in (("rss", "total"), ("pss", "total")))
        + " | "
        + " | ".join(str(slopes.get(f"rss {k}", "n/a")) for k in kinds)
        + " |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000, help="stateless backlog (0 = skipped)")
    parser.add_argument("--step", type=int, default=1_000_000, help="records between two points of the curve")
    parser.add_argument("--lines", type=int, default=0, help="windowed word count input lines (0 = skipped)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one job may take")
    parser.add_argument(
        "--api",
        choices=("sql", "datastream"),
        default="sql",
        help="the stateless job's map: transform.sql (ek-eos of bench/peers.py) or a DataStream Python function, "
        "which runs chained (ek-eos-py)",
    )
    parser.add_argument(
        "--ek-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="added to the stateless job file",
    )
    args = parser.parse_args()
    up = uptime()
    folder = Path(tempfile.mkdtemp(prefix="ek-memory-"))
    stamp = str(int(time.time()))
    results: dict[str, Any] = {}
    with bench_broker() as bootstrap:
        if args.records:
            results["stateless"] = stateless(bootstrap, folder, args, stamp)
            results["stateless"]["load_average_1m_after"] = round(os.getloadavg()[0], 2)
        if args.lines:
            results["windowed"] = windowed(bootstrap, folder, args, stamp)
            results["windowed"]["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps({k: {f: v for f, v in r.items() if f != "curve"} for k, r in results.items()}))
    conclude(
        "memory",
        {"uptime_before": up, "ek_settings": args.ek_setting, **results},
        "\n\n".join(markdown(r) for r in results.values()),
        [name for name, r in results.items() if not r["exact"]],
        folder,
    )


if __name__ == "__main__":
    main()
