"""Nexmark q0, q1, q2, q5, q7, q8 through ethereal-kafka, exactly-once, each output checked against its answer.

    flock /tmp/ek-bench.lock nice -n 19 .venv/bin/python bench/nexmark.py --events 200000 --rounds 2
    make bench-nexmark NEXMARK_ARGS="--events 20000 --queries q5,q8"

Generates Nexmark's event stream (bench/nexmark_model.py: persons, auctions and bids in Nexmark's 1 : 3 : 46
proportions, seeded, event time advancing `1000 / --rate` ms per event) until every query has `--events` input
events (its first `--events` bids; its first `--events` persons-or-auctions for q8, which reads those two kinds: a
longer prefix of the same stream), and writes them to **one topic per event kind** (`persons`, `auctions`, `bids`; 2 partitions each, the i-th event of a kind to partition i % 2, the Kafka
record timestamp set to the event's `date_time`), as Nexmark's Kafka setups with typed sources do: each query reads
only the kinds it needs with that kind's schema, and no query filters a mixed stream.

Each query runs as a user would run it: a job file (JSON sources and a JSON sink, exactly-once, the project's
defaults otherwise) started by `ethereal-kafka run JOB --available-now` (local[2]) into a fresh 2-partition output
topic. q0 (passthrough), q1 (`price * 0.908`) and q2 (`auction % 123 = 0`) are `transform.sql`; q5 (hot items),
q7 (highest bid) and q8 (new sellers) are DataStream pipelines (bench/nexmark_queries.py) on Spark-native windows
and joins. After the run the output is read read_committed and compared, as a multiset, with the answer the
reference computes from the same events (lost / duplicate / unexpected rows): a row that differs is **WRONG** and
the bench exits non-zero.

Per query: input events (the records of the kinds it reads); records/s including start-up (process start to exit)
and over the epochs (first epoch planned to last epoch committed, from the query's checkpoint); CPU-seconds per 1M
input events of the whole process tree (driver, JVM, PySpark's daemon and workers, sampled with psutil: the daemon
ignores SIGCHLD, so the workers' CPU is summed per process), in all and over the epochs, and split by process kind
(`cpu_s_by_process`: the driver, the JVM, the Python daemon and workers); peak RSS of the tree; output rows.
`--ek-setting KEY=VALUE` adds a setting to every job file (e.g. `epoch.target.ms=20000`). `uptime` before each run goes into bench/results/nexmark.json; a Markdown table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nexmark_model as model
from common import TreeCpu, bench_broker, query_epochs, write_result
from confluent_kafka import Producer
from nexmark_queries import SQL

from ethereal_kafka.connectors.kafka.topics import create_topic, read_all

HERE = Path(__file__).resolve().parent
PARTITIONS = 2
#: Record timestamps far from the broker's clock must not be deleted by retention during the run.
KEEP = {"retention.ms": "-1"}
WHAT = {
    "q0": "passthrough (SQL)",
    "q1": "currency conversion (SQL)",
    "q2": "selection (SQL)",
    "q5": "hot items: hop 10 s / 2 s, top auctions (native windows)",
    "q7": "highest bid: tumble 10 s max, join-back (native window + join)",
    "q8": "new sellers: persons ⋈ auctions, tumble 10 s (native semi join)",
}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


# -- input ----------------------------------------------------------------------------------------------------------
def feed(bootstrap: str, topics: dict[str, str], by_kind: dict[str, list[dict[str, Any]]]) -> float:
    """Write every event to its kind's topic (i-th of a kind to partition i % 2, timestamp = `date_time`)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "all"}
    )
    began = time.monotonic()
    for kind, records in by_kind.items():
        for i, record in enumerate(records):
            value = json.dumps(record, separators=(",", ":")).encode()
            while True:
                try:
                    producer.produce(
                        topics[kind], value, partition=i % PARTITIONS, timestamp=record["date_time"]
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
    if producer.flush(120):
        raise SystemExit("the input was not fully written")
    return time.monotonic() - began


# -- one query ------------------------------------------------------------------------------------------------------
def write_job(
    folder: Path,
    query: str,
    bootstrap: str,
    topics: dict[str, str],
    output: str,
    app_id: str,
    settings: list[str],
) -> Path:
    """The query's job file and connector files in `folder`; returns the job file. `settings` (`key=value`) are
    appended to the job file."""
    folder.mkdir(parents=True, exist_ok=True)
    kinds = model.QUERIES[query]
    for kind in kinds:
        (folder / f"{kind}.properties").write_text(
            f"connector.class=kafka-source\nname={kind}\nbootstrap.servers={bootstrap}\ntopics={topics[kind]}\n"
            f"starting.offsets=earliest\nvalue.format=json\nvalue.schema={model.SCHEMAS[kind]}\n"
        )
    (folder / "out.properties").write_text(
        f"connector.class=kafka-sink\nname=out\nbootstrap.servers={bootstrap}\ntopic={output}\n"
        "value.format=json\n" + ("value.column=*\n" if query in SQL else "")
    )
    transform = f"transform.sql={SQL[query]}" if query in SQL else f"pipeline=nexmark_queries:{query}"
    (folder / "job.properties").write_text(
        f"app.id={app_id}\nsources={','.join(f'{k}.properties' for k in kinds)}\nsinks=out.properties\n"
        f"{transform}\ncheckpoint.location={folder / 'checkpoint'}\ndelivery.guarantee=exactly-once\n"
        + "".join(f"{setting}\n" for setting in settings)
    )
    return folder / "job.properties"


class EpochCpu:
    """Polls a run's checkpoint on a thread: the tree's CPU when the first epoch was planned and at the latest
    commit (the CPU over the epochs is the difference)."""

    def __init__(self, checkpoint: Path, cpu: TreeCpu) -> None:
        self.checkpoint = checkpoint
        self.cpu = cpu
        self.at_first: float | None = None
        self.at_last: float | None = None
        self._commits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _now(self) -> float:
        self.cpu.sample()
        return self.cpu.seconds

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            queries = [p for p in self.checkpoint.glob("*") if p.is_dir() and p.name != "sources"]
            if not queries:
                continue
            if self.at_first is None and (queries[0] / "offsets" / "0").exists():
                self.at_first = self._now()
            commits = queries[0] / "commits"
            count = sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0
            if count > self._commits:
                self._commits = count
                self.at_last = self._now()

    def __enter__(self) -> EpochCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_query(
    query: str,
    bootstrap: str,
    topics: dict[str, str],
    by_kind: dict[str, list[dict[str, Any]]],
    tag: str,
    folder: Path,
    timeout_s: float,
    settings: list[str],
) -> dict[str, Any]:
    """Run one query to the end of its input, measure it and check its output (see the module docstring)."""
    output = create_topic(bootstrap, f"nexmark-{query}-out-{tag}", PARTITIONS)
    job = write_job(folder, query, bootstrap, topics, output, f"nexmark-{query}-{tag}", settings)
    events = sum(len(by_kind[k]) for k in model.QUERIES[query])
    env = {
        **os.environ,
        "ETHEREAL_KAFKA_STATE": str(folder / "state"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    before = uptime()
    log = folder / "run.log"
    began = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "ethereal_kafka.cli", "run", str(job), "--available-now"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    cpu = TreeCpu(process.pid)
    with cpu, EpochCpu(folder / "checkpoint", cpu) as epoch_cpu:
        code = cpu.reap(process, timeout_s)
        if code is None:
            os.killpg(process.pid, 9)
            code = cpu.reap(process, 60)
        wall = time.monotonic() - began
        for pid in cpu.follow(30):
            os.kill(pid, 9)
    if code != 0:
        print(f"{query}: exit code {code}; the end of {log}:\n{log.read_text()[-3000:]}", file=sys.stderr)
    epochs, first, last = query_epochs(folder / "checkpoint") if code == 0 else (0, 0.0, 0.0)
    written = read_all(bootstrap, output, "read_committed", timeout_s=120)
    got = Counter(model.row(query, json.loads(r.value or b"null")) for r in written)
    check = model.compare(model.answer(query, by_kind), got)
    correct = code == 0 and check["lost"] == check["duplicates"] == check["unexpected"] == 0
    steady_cpu = (
        epoch_cpu.at_last - epoch_cpu.at_first
        if epoch_cpu.at_first is not None and epoch_cpu.at_last is not None
        else None
    )
    return {
        "query": query,
        "what": WHAT[query],
        "uptime_before": before,
        "exit_code": code,
        "events": events,
        "wall_s": round(wall, 1),
        "records_per_s": round(events / wall),
        "epochs": epochs,
        "epochs_s": round(last - first, 2),
        "records_per_s_epochs": round(events / (last - first)) if last > first else None,
        "cpu_s": round(cpu.seconds, 1),
        "cpu_s_by_process": cpu.by_kind(),
        "cpu_s_per_1m": round(cpu.seconds / events * 1e6, 1),
        "cpu_s_epochs": None if steady_cpu is None else round(steady_cpu, 1),
        "cpu_s_per_1m_epochs": None if steady_cpu is None else round(steady_cpu / events * 1e6, 1),
        "peak_rss_mb": round(cpu.peak_rss / 2**20),
        "output_rows": check["written"],
        "check": check,
        "correct": correct,
        "log": str(log),
    }


# -- report ---------------------------------------------------------------------------------------------------------
def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def markdown(rows: list[dict[str, Any]]) -> str:
    """One line per query and round."""
    lines = [
        "| query | round | input events | records/s (incl. start) | records/s (epochs) | epochs "
        "| CPU-s / 1M (all) | CPU-s / 1M (epochs) | peak RSS | output rows | correct |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        check = r["check"]
        verdict = (
            "yes"
            if r["correct"]
            else f"**WRONG** (exit {r['exit_code']}, lost {check['lost']}, duplicates {check['duplicates']}, "
            f"unexpected {check['unexpected']})"
        )
        lines.append(
            f"| {r['query']} {r['what']} | {r['round']} | {r['events']:,} | {_num(r['records_per_s'])} "
            f"| {_num(r['records_per_s_epochs'])} | {r['epochs']} | {_num(r['cpu_s_per_1m'])} "
            f"| {_num(r['cpu_s_per_1m_epochs'])} | {r['peak_rss_mb'] / 1024:.2f} GB "
            f"| {r['output_rows']:,} of {check['expected']:,} | {verdict} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000, help="input events of each query")
    parser.add_argument(
        "--queries", default=",".join(model.QUERIES), help="comma-separated, run in this order"
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of every query (one after the other)")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--rate", type=int, default=1000, help="events per second of event time")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    parser.add_argument(
        "--ek-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a job setting added to every job file (repeatable), e.g. epoch.target.ms=10000",
    )
    args = parser.parse_args()
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in queries if q not in model.QUERIES]
    if unknown:
        parser.error(f"unknown queries {unknown}; known: {', '.join(model.QUERIES)}")

    at_start = uptime()
    print(f"uptime: {at_start}")
    # Event time ends 10 minutes ago at the latest, and starts on a whole minute (windows align with it).
    base_ms = (int(time.time()) // 60) * 60_000 - model.span(args.events) * 1000 // args.rate - 600_000
    base_ms -= base_ms % 60_000
    by_kind = model.take(args.events, args.seed, args.rate, base_ms)
    folder = Path(tempfile.mkdtemp(prefix="ek-nexmark-"))
    stamp = str(int(time.time()))
    rows: list[dict[str, Any]] = []
    with bench_broker() as bootstrap:
        topics = {
            kind: create_topic(bootstrap, f"nexmark-{kind}-{stamp}", PARTITIONS, KEEP) for kind in model.KINDS
        }
        feed_s = feed(bootstrap, topics, by_kind)
        print(f"fed {', '.join(f'{len(v):,} {k}' for k, v in by_kind.items())} in {feed_s:.1f} s")
        for round_ in range(1, args.rounds + 1):
            for query in queries:
                tag = f"{stamp}-r{round_}"
                result = run_query(
                    query,
                    bootstrap,
                    topics,
                    by_kind,
                    tag,
                    folder / f"{query}-r{round_}",
                    args.timeout,
                    args.ek_setting,
                )
                result["round"] = round_
                rows.append(result)
                print(json.dumps(result))
    text = markdown(rows)
    path = write_result(
        "nexmark",
        {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "uptime_at_start": at_start,
            "events_per_query": args.events,
            "events_by_kind": {k: len(v) for k, v in by_kind.items()},
            "seed": args.seed,
            "rate": args.rate,
            "ek_settings": args.ek_setting,
            "partitions": PARTITIONS,
            "feed_s": round(feed_s, 1),
            "runs": rows,
            "markdown": text,
        },
    )
    print(text)
    print(f"written to {path}")
    wrong = [f"{r['query']} (round {r['round']})" for r in rows if not r["correct"]]
    if wrong:
        raise SystemExit(f"failed or wrong: {', '.join(wrong)} (logs under {folder})")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
