"""End-to-end latency at a steady input rate, exactly-once: ethereal-kafka at several trigger intervals, and the
hand-written transactional loop beside it (issue 12, target 5: p99 ≤ 2x the trigger interval at 10k records/s).

    nice -n 19 .venv/bin/python bench/latency.py                                 # 10k/s for 60 s; 500, 1000, 2000 ms
    nice -n 19 .venv/bin/python bench/latency.py --seconds 15 --triggers 1000 --no-loop         # a short run

Per system, in turn, on fresh topics (2 partitions each): the system starts as a subprocess (`ethereal-kafka run JOB`,
not available-now: the bench/peers.py map job, exactly-once, the project's defaults plus `trigger.interval.ms`; or
`bench/peers_loop.py --follow`, `json`, a transaction every 100 ms), and at the same moment the paced producer
(bench/latency_producer.py, a process of its own) starts writing `--rate` bids per second for `--seconds`, each
carrying its produce time (its `date_time` field and its record timestamp). A read_committed consumer in this process
reads the output as it becomes readable; a record's latency is the wall-clock time of the poll that returned it minus
its produce time. Once the producer has ended and every id has been read (or `--drain` seconds passed), the system is
stopped with SIGTERM.

Figures per system: start-up (process start to the first readable output: for both systems the first committed
transaction) and the latency of the records produced before it (start-up backlog); over the steady part (records
produced after the first output) p50/p90/p99/max latency, and the same split at the system's write (output record
timestamp - produce time: waiting for the epoch plus processing) and after it (poll - output timestamp: waiting for
the commit); p99 per 10 s of produce time (a catch-up after start-up shows in the first buckets) and p50/p99 over
the records produced in the last `--tail` seconds of the input (the settled figure, once any catch-up is over; the
table compares its p99 with the trigger interval); for ethereal-kafka the epochs (count, duration, records, from
its checkpoint history); the achieved input
rate; CPU-s per 1M records of the system's process tree (psutil, bench/common.py `TreeCpu`) in all and over the
steady part; lost and duplicate ids (must be 0 / 0). The reader shares the 2 cores with the system and the producer:
its own delay is part of every figure (fetch.wait.max.ms=10). Writes bench/results/latency.json and prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import TreeCpu, bench_broker, conclude, drained, percentiles, uptime
from peers import PARTITIONS, OutputWatcher, Run, write_ethereal_job, write_ethereal_py_job

from ethereal_kafka.connectors.kafka.topics import create_topic

HERE = Path(__file__).resolve().parent
POINTS = (50, 90, 99)


@dataclass(frozen=True)
class Target:
    """One system under test: its key in the results, its table label, and its trigger interval (0: the loop)."""

    name: str
    label: str
    trigger_ms: int
    api: str = "sql"  # ethereal-kafka's map: `transform.sql`, or a DataStream Python function (runs chained)


class LatencyReader(OutputWatcher):
    """bench/peers.py's output reader (read_committed, on a thread, each id's count, the tree's CPU at the first and
    at the last expected record) that also keeps, per bid id, its produce time, the latency of its first arrival
    (poll time - produce time) and its write delay (output record timestamp - produce time)."""

    def __init__(self, bootstrap: str, topic: str, expected: int) -> None:
        super().__init__(bootstrap, topic, expected, drain_s=30, fetch_wait_ms=10)
        self.produced_ms = array("d", [math.nan]) * expected
        self.latency_ms = array("d", [math.nan]) * expected
        self.write_ms = array("d", [math.nan]) * expected
        self.first_wall_ms: float | None = None  # wall clock (ms) of the first readable record

    def _count(self, messages: list[Any], stable: dict[int, int]) -> None:
        polled_ms = time.time_ns() / 1e6  # called right after the poll that returned `messages`
        if messages and self.first_wall_ms is None:
            self.first_wall_ms = polled_ms
        for message in messages:
            if message.error():
                continue
            try:
                record = json.loads(message.value() or b"")
                ident, produced = int(record["id"]), float(record["date_time"])
            except (ValueError, KeyError, TypeError):
                continue  # counted as unexpected below
            if 0 <= ident < self.expected and self.counts[ident] == 0:
                self.produced_ms[ident] = produced
                self.latency_ms[ident] = polled_ms - produced
                self.write_ms[ident] = message.timestamp()[1] - produced
        super()._count(messages, stable)


def command(target: Target, run: Run, output: str) -> list[str]:
    """The argv that starts `target` reading `run.source` into `output`."""
    if target.trigger_ms == 0:
        return [
            sys.executable,
            str(HERE / "peers_loop.py"),
            *("--bootstrap", run.bootstrap, "--input", run.source, "--output", output),
            *("--group", f"latency-{target.name}-{run.stamp}", "--partitions", str(PARTITIONS)),
            *("--json", "json", "--workload", run.workload, "--follow"),
        ]
    settings = Run(
        **{**run.__dict__, "ek_settings": [f"trigger.interval.ms={target.trigger_ms}", *run.ek_settings]}
    )
    app_id = f"latency-{target.name}-{run.stamp}"
    if target.api == "datastream":
        job = write_ethereal_py_job(run.folder / target.name, settings, output, app_id)
    else:
        job = write_ethereal_job(run.folder / target.name, settings, output, app_id, "exactly-once")
    return [sys.executable, "-m", "ethereal_kafka.cli", "run", str(job)]


def measure(
    target: Target, run: Run, rate: float, seconds: float, drain_s: float, tail_s: float
) -> dict[str, Any]:
    """Run one system under the paced input and measure it (see the module docstring)."""
    source = create_topic(run.bootstrap, f"latency-in-{target.name}-{run.stamp}", PARTITIONS)
    output = create_topic(run.bootstrap, f"latency-out-{target.name}-{run.stamp}", PARTITIONS)
    run = Run(**{**run.__dict__, "source": source})
    expected = int(rate * seconds)
    reader = LatencyReader(run.bootstrap, output, expected)
    reader.start()
    log = run.folder / f"{target.name}.log"
    began_ms = time.time_ns() / 1e6
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command(target, run, output), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    producer = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "latency_producer.py"),
            *("--bootstrap", run.bootstrap, "--topic", source),
            *("--rate", str(rate), "--seconds", str(seconds), "--partitions", str(PARTITIONS)),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        cpu = reader.cpu = TreeCpu(process.pid, interval_s=0.25)
        with cpu:
            out, _ = producer.communicate()
            fed = json.loads(out.decode().strip().splitlines()[-1]) if producer.returncode == 0 else {}
            deadline = time.monotonic() + drain_s
            while reader.unique < expected and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.2)
            caught_up = reader.unique >= expected
            process.send_signal(signal.SIGTERM)
            code = cpu.reap(process, 90)
            if code is None:
                print(f"{target.name}: still running 90 s after SIGTERM, killed", file=sys.stderr)
                os.killpg(process.pid, signal.SIGKILL)
                code = cpu.reap(process, 60)
            leftovers = cpu.follow(30)
    except BaseException:  # the bench failed: leave no job, JVM or producer behind
        producer.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        raise
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    reader.finish()
    if producer.returncode != 0:
        raise SystemExit(f"the paced producer failed (exit {producer.returncode})")
    result = summarise(target, reader, cpu, fed, began_ms, expected, tail_s)
    result.update(
        exit_code=code, caught_up_before_stop=caught_up, left_running_killed=leftovers, log=str(log)
    )
    if target.trigger_ms:
        result["epochs"] = epoch_figures(f"latency-{target.name}-{run.stamp}")
    return result


def epoch_figures(app_id: str) -> dict[str, Any]:
    """How many epochs an ethereal-kafka run committed, and their durations and sizes (its checkpoint history)."""
    epochs, records, seconds = drained(app_id)
    return {
        "committed": len(epochs),
        "records": records,
        "seconds": round(seconds, 1),
        "duration_ms": _pcts([float(e.duration_ms) for e in epochs]),
        "records_in": _pcts([float(max(0, e.records_in)) for e in epochs]),
    }


def _pcts(values: list[float]) -> dict[str, float]:
    figures = {k: round(v, 1) for k, v in percentiles(values, POINTS).items()}
    if values:
        figures["max"] = round(max(values), 1)
    return figures


def summarise(
    target: Target,
    reader: LatencyReader,
    cpu: TreeCpu,
    fed: dict[str, Any],
    began_ms: float,
    expected: int,
    tail_s: float,
) -> dict[str, Any]:
    """One system's figures from what the reader and the sampler saw."""
    first = reader.first_wall_ms or math.inf
    seen = [i for i in range(expected) if reader.counts[i]]
    startup = [i for i in seen if reader.produced_ms[i] < first]
    steady = [i for i in seen if reader.produced_ms[i] >= first]
    tail_from = float(fed.get("last_ms", math.inf)) - 1000 * tail_s
    tail = [i for i in seen if reader.produced_ms[i] >= tail_from]
    buckets: dict[int, list[float]] = {}
    start_ms = float(fed.get("first_ms", began_ms))
    for i in seen:
        buckets.setdefault(int((reader.produced_ms[i] - start_ms) // 10_000), []).append(reader.latency_ms[i])
    lost = expected - reader.unique
    duplicates = reader.duplicates()
    cpu_steady = reader.last[1] - reader.steady_from[1] if reader.last and reader.steady_from else None
    return {
        "system": target.name,
        "label": target.label,
        "trigger_ms": target.trigger_ms or None,
        "input": fed,
        "startup_s": round((first - began_ms) / 1000, 2) if reader.first_wall_ms else None,
        "startup_records": len(startup),
        "startup_latency_ms": _pcts([reader.latency_ms[i] for i in startup]),
        "steady_records": len(steady),
        "latency_ms": _pcts([reader.latency_ms[i] for i in steady]),
        "until_write_ms": _pcts([reader.write_ms[i] for i in steady]),
        "after_write_ms": _pcts([reader.latency_ms[i] - reader.write_ms[i] for i in steady]),
        "tail_s": tail_s,
        "tail_records": len(tail),
        "tail_latency_ms": _pcts([reader.latency_ms[i] for i in tail]),
        "p99_per_10s_ms": {
            f"{10 * k}-{10 * k + 10}s": round(percentiles(v, (99,))["p99"], 1)
            for k, v in sorted(buckets.items())
        },
        "cpu_s": round(cpu.seconds, 2),
        "cpu_s_per_1m": round(cpu.seconds / expected * 1e6, 1),
        "cpu_s_per_1m_steady": round(cpu_steady / len(steady) * 1e6, 1) if cpu_steady and steady else None,
        "peak_rss_mb": round(cpu.peak_rss / 2**20),
        "output": {
            "unique": reader.unique,
            "lost": lost,
            "duplicates": duplicates,
            "unexpected": reader.unexpected,
        },
        "exact": lost == 0 and duplicates == 0 and reader.unexpected == 0,
    }


def _ms(figures: dict[str, float], key: str) -> str:
    return f"{figures[key] / 1000:.2f} s" if key in figures else "n/a"


def markdown(rows: list[dict[str, Any]]) -> str:
    """The latency table as Markdown: latencies in seconds over the steady part (produced after the first output)
    and over the last `tail_s` of the input, the tail's p99 against the trigger interval."""
    tail_s = rows[0]["tail_s"] if rows else 30
    lines = [
        "| system | trigger | input rate | start-up (backlog records, their max latency) | p50 | p90 | p99 | max "
        f"| p50 / p99, last {tail_s:g} s of input | p99 (last {tail_s:g} s) / trigger | epochs: count, median ms, median records "
        "| CPU-s / 1M (steady) | lost / duplicates |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lat, tail, out = r["latency_ms"], r["tail_latency_ms"], r["output"]
        trigger = f"{r['trigger_ms']} ms" if r["trigger_ms"] else "commit every 100 ms"
        ratio = f"{tail['p99'] / r['trigger_ms']:.2f}" if r["trigger_ms"] and tail else "n/a"
        check = f"{out['lost']} / {out['duplicates']}" + ("" if r["exact"] else " **WRONG**")
        startup = f"{r['startup_s']} s ({r['startup_records']:,}, {_ms(r['startup_latency_ms'], 'max')})"
        epochs = r.get("epochs")
        sizes = (
            f"{epochs['committed']}: {epochs['duration_ms'].get('p50')} ms, {epochs['records_in'].get('p50'):,.0f}"
            if epochs
            else "n/a"
        )
        lines.append(
            f"| {r['label']} | {trigger} | {r['input'].get('rate', 'n/a'):,}/s | {startup} | "
            + " | ".join(_ms(lat, k) for k in ("p50", "p90", "p99", "max"))
            + f" | {_ms(tail, 'p50')} / {_ms(tail, 'p99')} | {ratio} | {sizes} | {r['cpu_s_per_1m_steady']} | {check} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=10_000, help="input records per second")
    parser.add_argument("--seconds", type=float, default=60, help="how long the input is produced")
    parser.add_argument("--triggers", default="500,1000,2000", help="ethereal-kafka trigger intervals (ms)")
    parser.add_argument("--no-loop", action="store_true", help="skip the hand-written loop")
    parser.add_argument(
        "--drain", type=float, default=120, help="seconds to wait for the output after the input"
    )
    parser.add_argument(
        "--tail",
        type=float,
        default=30,
        help="seconds at the end of the input whose latency is reported apart",
    )
    parser.add_argument("--pause", type=float, default=3, help="seconds between two systems")
    parser.add_argument(
        "--api",
        choices=("sql", "datastream"),
        default="sql",
        help="ethereal-kafka's map: transform.sql, or a DataStream Python function, which runs chained",
    )
    parser.add_argument(
        "--ek-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="added to the job file (repeatable)",
    )
    args = parser.parse_args()
    label = "**ethereal-kafka**" + (", DataStream Python map (chained)" if args.api == "datastream" else "")
    targets = [Target(f"ek-{ms}", label, int(ms), args.api) for ms in args.triggers.split(",") if ms.strip()]
    if not args.no_loop:
        targets.append(Target("loop-json", "hand-written loop, `json`, 2 processes", 0))
    up = uptime()
    folder = Path(tempfile.mkdtemp(prefix="ek-latency-"))
    stamp = str(int(time.time()))
    rows: list[dict[str, Any]] = []
    with bench_broker() as bootstrap:
        run = Run(bootstrap, "", int(args.rate * args.seconds), "map", stamp, folder, args.ek_setting)
        for target in targets:
            time.sleep(args.pause)
            result = measure(target, run, args.rate, args.seconds, args.drain, args.tail)
            result["load_average_1m_after"] = round(os.getloadavg()[0], 2)
            rows.append(result)
            print(json.dumps(result))
    conclude(
        "latency",
        {
            "uptime_before": up,
            "rate": args.rate,
            "seconds": args.seconds,
            "partitions": PARTITIONS,
            "ek_settings": args.ek_setting,
            "systems": rows,
        },
        markdown(rows),
        [r["system"] for r in rows if not r["exact"] or r["exit_code"] != 0],
        folder,
    )


if __name__ == "__main__":
    main()
