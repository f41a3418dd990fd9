"""ethereal-kafka side by side with its peers on one stateless JSON job: same broker, same input, one run.

    nice -n 19 .venv/bin/python bench/peers.py                       # 1M bids, every default system
    nice -n 19 .venv/bin/python bench/peers.py --records 50000 --systems loop-json,ek-eos

Feeds one input topic (2 partitions) with `--records` JSON bids (Nexmark-like, ~145 B each), then runs each system
in turn as a subprocess reading the whole topic into a fresh output topic (`--workload map`: `price * 0.908`, every
other field unchanged; `passthrough`: decoded and encoded unchanged):

- `loop-json`, `loop-orjson`: a hand-written confluent-kafka loop (bench/peers_loop.py), one process per input
  partition, transactional (`send_offsets_to_transaction`, a commit every 10,000 records or 100 ms);
  `loop-json-alo`, `loop-orjson-alo`: the same loop at-least-once (flush, then commit the offsets).
- `quix-eos` (`quix-alo`): Quix Streams 3.x (bench/peers_quix.py) in its own virtualenv, one process.
- `spark-jvm`: Spark's own JVM Kafka source and sink (bench/peers_spark.py), at-least-once as Spark's sink is.
- `ek-eos`, `ek-alo`: ethereal-kafka, a job file (JSON source and sink with the bid's schema, `transform.sql`) run by
  `ethereal-kafka run --available-now` with the project's defaults.
- `ek-eos-py`: the same job with the map as a Python function of the DataStream API (as a Quix user writes it),
  which the project's defaults run chained into the source's read tasks (`--ek-setting
  pipeline.operator.chaining=false` runs each operator as its own Spark step).

Per system, while it runs: a read_committed consumer in this process reads the output (the time of the first and of
the last expected record, and each bid id's count), and psutil samples the CPU and RSS of the system's whole process
tree every 0.1 s (each process's largest CPU kept: PySpark's daemon ignores SIGCHLD, so its workers' CPU reaches no
parent). Figures: records/s from the process start to the last output record committed, and steady (from the first
output record to the last); CPU-seconds per 1M records of the whole tree, in all and steady (CPU between the first
and the last output record over the records committed in between); start-up (process start to the first output
record); peak RSS (sum over the tree); lost, duplicate and unexpected ids. The broker's own CPU is not counted.
`uptime` before the run goes into the result. Writes bench/results/peers.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers_quix
import peers_spark
from common import TreeCpu, bench_broker, conclude, uptime
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from peers_workload import PRICE_FACTOR, WORKLOADS

from ethereal_kafka.connectors.kafka.topics import create_topic
from ethereal_kafka.paths import cache_home

HERE = Path(__file__).resolve().parent
PARTITIONS = 2
CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
_ID = re.compile(rb'"id":\s*(\d+)')


# -- input ----------------------------------------------------------------------------------------------------------
def bid(i: int) -> dict[str, Any]:
    """Bid number `i` (Nexmark's fields, plus the `id` the output check counts by)."""
    auction = 1000 + (i * 7919) % 10007
    return {
        "id": i,
        "auction": auction,
        "bidder": 20000 + (i * 104729) % 50021,
        "price": 100 + (i * 31) % 9901,
        "channel": CHANNELS[i % len(CHANNELS)],
        "url": f"https://nexmark.com/{auction}",
        "date_time": 1_800_000_000_000 + i * 10,
        "extra": "",
    }


def feed(bootstrap: str, topic: str, records: int) -> tuple[float, float]:
    """Produce `records` bids, bid i to partition i % 2 keyed by its auction; returns (seconds, mean value bytes)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "all"}
    )
    began, size = time.monotonic(), 0
    for i in range(records):
        record = bid(i)
        value = json.dumps(record, separators=(",", ":")).encode()
        size += len(value)
        while True:
            try:
                producer.produce(topic, value, str(record["auction"]).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("the input was not fully written")
    return time.monotonic() - began, size / max(1, records)


# -- the systems ----------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """What every system's command is built from."""

    bootstrap: str
    source: str
    records: int
    workload: str
    stamp: str
    folder: Path
    ek_settings: list[str]
    spark_jars: list[Path] = field(default_factory=list)
    quix_python: Path | None = None


@dataclass(frozen=True)
class System:
    """A peer: its table label, guarantee and how to start it (`command(run, output topic, name)` -> argv)."""

    label: str
    guarantee: str
    command: Callable[[Run, str, str], list[str]]


def _loop(library: str, guarantee: str) -> Callable[[Run, str, str], list[str]]:
    def command(run: Run, output: str, name: str) -> list[str]:
        return [
            sys.executable,
            str(HERE / "peers_loop.py"),
            *("--bootstrap", run.bootstrap, "--input", run.source, "--output", output),
            *("--group", f"peers-{name}-{run.stamp}", "--partitions", str(PARTITIONS)),
            *("--json", library, "--workload", run.workload, "--guarantee", guarantee),
        ]

    return command


def _quix(guarantee: str) -> Callable[[Run, str, str], list[str]]:
    def command(run: Run, output: str, name: str) -> list[str]:
        assert run.quix_python is not None
        return [
            str(run.quix_python),
            str(HERE / "peers_quix.py"),
            *("--bootstrap", run.bootstrap, "--input", run.source, "--output", output),
            *("--group", f"peers-{name}-{run.stamp}", "--records", str(run.records)),
            *("--workload", run.workload, "--guarantee", guarantee),
        ]

    return command


def _spark(run: Run, output: str, name: str) -> list[str]:
    return [
        sys.executable,
        str(HERE / "peers_spark.py"),
        *("--bootstrap", run.bootstrap, "--input", run.source, "--output", output),
        *("--checkpoint", str(run.folder / name / "checkpoint"), "--workload", run.workload),
        *("--jars", ",".join(str(j) for j in run.spark_jars)),
    ]


def _ethereal(guarantee: str) -> Callable[[Run, str, str], list[str]]:
    def command(run: Run, output: str, name: str) -> list[str]:
        job = write_ethereal_job(run.folder / name, run, output, f"peers-{name}-{run.stamp}", guarantee)
        return [sys.executable, "-m", "ethereal_kafka.cli", "run", str(job), "--available-now"]

    return command


def write_ethereal_job(folder: Path, run: Run, output: str, app_id: str, guarantee: str) -> Path:
    """Write the ethereal-kafka job (JSON source and sink with the bid's schema, a `transform.sql` map) and
    return the job file. `run.ek_settings` (`key=value`) are appended to the job file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "source.properties").write_text(
        f"connector.class=kafka-source\nname=bids\nbootstrap.servers={run.bootstrap}\ntopics={run.source}\n"
        f"starting.offsets=earliest\nvalue.format=json\nvalue.schema={peers_spark.BID_DDL}\n"
    )
    (folder / "sink.properties").write_text(
        f"connector.class=kafka-sink\nname=out\nbootstrap.servers={run.bootstrap}\ntopic={output}\n"
        "value.format=json\nvalue.column=*\n"
    )
    price = f"price * {PRICE_FACTOR}D AS price" if run.workload == "map" else "price"
    (folder / "job.properties").write_text(
        f"app.id={app_id}\nsources=source.properties\nsinks=sink.properties\n"
        f"transform.sql=SELECT key, id, auction, bidder, {price}, channel, url, date_time, extra FROM bids\n"
        f"checkpoint.location={folder / 'checkpoint'}\ndelivery.guarantee={guarantee}\n"
        + "".join(f"{setting}\n" for setting in run.ek_settings)
    )
    return folder / "job.properties"


def _ethereal_py(run: Run, output: str, name: str) -> list[str]:
    job = write_ethereal_py_job(run.folder / name, run, output, f"peers-{name}-{run.stamp}")
    return [sys.executable, "-m", "ethereal_kafka.cli", "run", str(job), "--available-now"]


#: The DataStream pipeline of `ek-eos-py`, written beside its job file (whose folder the job imports from).
_PY_PIPELINE = '''"""bench/peers.py's workload with the DataStream API: a Python map, as a Quix user writes it."""

OUTPUT = "{output}"


def _map(bid):
    bid["price"] = bid["price"] * {factor}
    return bid


def bids(env):
    stream = env.from_source("bids")
    if {mapped}:
        stream = stream.map(_map, OUTPUT)
    stream.sink_to("out")
'''


def write_ethereal_py_job(folder: Path, run: Run, output: str, app_id: str) -> Path:
    """`write_ethereal_job` with the map as a Python function of the DataStream API (`bids_pipeline.py`): with
    the project's defaults the query runs chained into its source's read tasks (`plan.chaining`)."""
    job = write_ethereal_job(folder, run, output, app_id, "exactly-once")
    typed = peers_spark.BID_DDL.replace("price bigint", "price double")
    (folder / "bids_pipeline.py").write_text(
        _PY_PIPELINE.format(output=typed, factor=PRICE_FACTOR, mapped=run.workload == "map")
    )
    (folder / "sink.properties").write_text(
        f"connector.class=kafka-sink\nname=out\nbootstrap.servers={run.bootstrap}\ntopic={output}\n"
        "value.format=json\n"
    )
    lines = [line for line in job.read_text().splitlines() if not line.startswith("transform.sql=")]
    job.write_text("\n".join([*lines, "pipeline=bids_pipeline:bids", ""]))
    return job


SYSTEMS: dict[str, System] = {
    "loop-json": System(
        "hand-written confluent-kafka loop, `json`, 2 processes",
        "exactly-once",
        _loop("json", "exactly-once"),
    ),
    "loop-orjson": System("same loop with `orjson`", "exactly-once", _loop("orjson", "exactly-once")),
    "quix-eos": System("Quix Streams 3.x, 1 process", "exactly-once", _quix("exactly-once")),
    "spark-jvm": System("Spark's JVM Kafka source+sink", "at-least-once", _spark),
    "ek-eos": System("**ethereal-kafka**", "exactly-once", _ethereal("exactly-once")),
    "ek-alo": System("**ethereal-kafka**", "at-least-once", _ethereal("at-least-once")),
    "ek-eos-py": System("**ethereal-kafka**, DataStream API, Python map", "exactly-once", _ethereal_py),
    "loop-json-alo": System(
        "hand-written loop, `json`, 2 processes", "at-least-once", _loop("json", "at-least-once")
    ),
    "loop-orjson-alo": System(
        "hand-written loop, `orjson`, 2 processes", "at-least-once", _loop("orjson", "at-least-once")
    ),
    "quix-alo": System("Quix Streams 3.x, 1 process", "at-least-once", _quix("at-least-once")),
}
DEFAULT_SYSTEMS = ("loop-json", "loop-orjson", "quix-eos", "spark-jvm", "ek-eos", "ek-alo")


# -- measuring one system -------------------------------------------------------------------------------------------
class OutputWatcher:
    """Reads an output topic read_committed on a thread while a system writes it.

    Records when the first record became readable, then the partitions' last stable offsets and the tree's CPU
    right after (the start of the steady window; `initial` counts the records below those offsets, committed before
    it), when the `expected`-th distinct bid id became readable (with the CPU then), and how often each id arrived. `finish()`, called once the system exited, reads on to the end of
    the topic (or gives up after `drain_s` without progress) and stops the thread.
    """

    def __init__(
        self, bootstrap: str, topic: str, expected: int, drain_s: float = 60, fetch_wait_ms: int = 50
    ) -> None:
        self.bootstrap = bootstrap
        self.fetch_wait_ms = fetch_wait_ms
        self.topic = topic
        self.expected = expected
        #: The sampler of the system's process tree, attached once the system started.
        self.cpu: TreeCpu | None = None
        self.drain_s = drain_s
        self.counts = bytearray(expected)
        self.read = 0
        self.unique = 0
        self.unexpected = 0
        self.initial = 0
        self.first_seen: float | None = None  # when the first record became readable (monotonic)
        #: (monotonic time, tree CPU-s) when the committed offsets were read just after the first record: the start
        #: of the steady window, whose records are those above these offsets (`initial` counts those below).
        self.steady_from: tuple[float, float] | None = None
        self.last: tuple[float, float] | None = None  # (monotonic time, tree CPU-s) at the expected-th id
        self.newest = 0.0  # when the latest new id arrived
        self.ready = threading.Event()
        self._finishing = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Start reading; returns once the consumer has its partitions."""
        self._thread.start()
        if not self.ready.wait(60):
            raise SystemExit(f"the output reader of {self.topic} did not start")

    def finish(self) -> None:
        """Read what is left up to the end of the topic, then stop."""
        self._finishing.set()
        self._thread.join()

    def _now_cpu(self) -> float:
        if self.cpu is None:
            return 0.0
        self.cpu.sample()
        return self.cpu.seconds

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"peers-watch-{time.time_ns()}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": self.fetch_wait_ms,
            }
        )
        partitions = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.consume(1, timeout=0.5)  # the topic is empty: connects and fetches metadata
        self.ready.set()
        stable: dict[int, int] = {}
        ends: dict[int, int] | None = None
        idle_since = time.monotonic()
        while True:
            messages = consumer.consume(10_000, timeout=0.05)
            now = time.monotonic()
            if messages and self.first_seen is None:
                self.first_seen = now
                stable = {  # a read_committed consumer's end offsets are the last stable offsets
                    p: consumer.get_watermark_offsets(
                        TopicPartition(self.topic, p), timeout=10, cached=False
                    )[1]
                    for p in range(PARTITIONS)
                }
                self.steady_from = (time.monotonic(), self._now_cpu())
            self._count(messages, stable)
            if messages:
                idle_since = now
            if self.last is None and self.unique >= self.expected:
                self.last = (now, self._now_cpu())
            if not self._finishing.is_set():
                continue
            if ends is None:
                ends = {
                    p: consumer.get_watermark_offsets(
                        TopicPartition(self.topic, p), timeout=10, cached=False
                    )[1]
                    for p in range(PARTITIONS)
                }
            positions = consumer.position([TopicPartition(self.topic, p) for p in range(PARTITIONS)])
            if all(ends[tp.partition] == 0 or tp.offset >= ends[tp.partition] for tp in positions):
                break
            if now - idle_since > self.drain_s:
                break
        consumer.close()

    def _count(self, messages: list[Any], stable: dict[int, int]) -> None:
        for message in messages:
            if message.error():
                continue
            self.read += 1
            if message.offset() < stable.get(message.partition(), 0):
                self.initial += 1
            match = _ID.search(message.value() or b"")
            ident = int(match.group(1)) if match else -1
            if not 0 <= ident < self.expected:
                self.unexpected += 1
                continue
            if self.counts[ident] == 0:
                self.unique += 1
                self.newest = time.monotonic()
            if self.counts[ident] < 255:
                self.counts[ident] += 1

    def duplicates(self) -> int:
        """Records read beyond the first of their id (ids seen 255+ times count 254 duplicates)."""
        return sum(n - 1 for n in self.counts if n > 1)


def measure(run: Run, name: str, system: System, timeout_s: float) -> dict[str, Any]:
    """Run one system to the end of the input and measure it (see the module docstring)."""
    output = create_topic(run.bootstrap, f"peers-out-{name}-{run.stamp}", PARTITIONS)
    argv = system.command(run, output, name)
    log = run.folder / f"{name}.log"
    watcher = OutputWatcher(run.bootstrap, output, run.records)
    watcher.start()
    began = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    cpu = watcher.cpu = TreeCpu(process.pid, interval_s=0.1)
    with cpu:
        code = cpu.reap(process, timeout_s)
        if code is None:
            print(f"{name}: still running after {timeout_s:.0f} s, killed", file=sys.stderr)
            os.killpg(process.pid, signal.SIGKILL)
            code = cpu.reap(process, 60)
        exited = time.monotonic()
        leftovers = cpu.follow(30)
    for pid in leftovers:  # descendants of the system that outlived it by 30 s
        os.kill(pid, signal.SIGKILL)
    watcher.finish()
    return row(name, system, run, watcher, cpu, began, exited, code, leftovers, log)


def row(
    name: str,
    system: System,
    run: Run,
    watcher: OutputWatcher,
    cpu: TreeCpu,
    began: float,
    exited: float,
    code: int | None,
    leftovers: list[int],
    log: Path,
) -> dict[str, Any]:
    """One system's result from what the watcher and the sampler saw."""
    n = run.records
    lost = n - watcher.unique
    duplicates = watcher.duplicates()
    first_at = watcher.first_seen or exited
    steady_at, steady_cpu = watcher.steady_from or (exited, cpu.seconds)
    last_at, last_cpu = watcher.last or (watcher.newest or exited, cpu.seconds)
    steady_records = watcher.unique - watcher.initial
    steady = steady_records >= 0.05 * n and last_at > steady_at
    exact = lost == 0 and watcher.unexpected == 0 and (duplicates == 0 or system.guarantee != "exactly-once")
    return {
        "system": name,
        "label": system.label,
        "guarantee": system.guarantee,
        "exit_code": code,
        "records": n,
        "wall_s": round(exited - began, 2),
        "startup_s": round(first_at - began, 2),
        "last_output_s": round(last_at - began, 2),
        "records_per_s": round(watcher.unique / (last_at - began)) if last_at > began else None,
        "records_per_s_steady": round(steady_records / (last_at - steady_at)) if steady else None,
        "records_committed_at_first_output": watcher.initial,
        "cpu_s": round(cpu.seconds, 2),
        "cpu_s_at_first_output": round(steady_cpu, 2),
        "cpu_s_per_1m": round(cpu.seconds / n * 1_000_000, 1),
        "cpu_s_per_1m_steady": round((last_cpu - steady_cpu) / steady_records * 1_000_000, 1)
        if steady
        else None,
        "peak_rss_mb": round(cpu.peak_rss / 2**20),
        "processes": len(cpu.seen),
        "output": {
            "read": watcher.read,
            "unique": watcher.unique,
            "lost": lost,
            "duplicates": duplicates,
            "unexpected": watcher.unexpected,
        },
        "exact": exact,
        "left_running_killed": leftovers,
        "log": str(log),
    }


# -- report ---------------------------------------------------------------------------------------------------------
def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:,}{unit}" if isinstance(value, int) else f"{value}{unit}"


def markdown(rows: list[dict[str, Any]], workload: str) -> str:
    """The issue's table (plus records/s and the output check) as Markdown."""
    lines = [
        f"| system (workload: {workload}) | guarantee | records/s (incl. start) | records/s (steady) "
        "| CPU-s / 1M (steady) | CPU-s / 1M (incl. start) | start-up | peak RSS | lost / duplicates |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out = r["output"]
        check = f"{out['lost']} / {out['duplicates']}" + ("" if r["exact"] else " **WRONG**")
        lines.append(
            f"| {r['label']} | {r['guarantee']} | {_num(r['records_per_s'])} | {_num(r['records_per_s_steady'])} "
            f"| {_num(r['cpu_s_per_1m_steady'])} | {_num(r['cpu_s_per_1m'])} | {r['startup_s']} s "
            f"| {r['peak_rss_mb'] / 1024:.2f} GB | {check} |"
        )
    return "\n".join(lines)


def prepare(names: list[str], run: Run) -> None:
    """Fetch what the chosen systems need before anything is timed: Spark's Kafka connector jars, Quix's venv."""
    if "spark-jvm" in names:
        import pyspark

        version, jars = peers_spark.connector_jars(cache_home(), pyspark.__version__)
        print(f"Spark's Kafka connector {version}: {len(jars)} jars")
        run.spark_jars = jars
    if any(n.startswith("quix") for n in names):
        run.quix_python = peers_quix.ensure_venv(cache_home())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        help=f"comma-separated, run in this order; known: {', '.join(SYSTEMS)}",
    )
    parser.add_argument("--workload", choices=WORKLOADS, default="map")
    parser.add_argument(
        "--ek-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a job setting added to the ethereal-kafka job files (repeatable), e.g. ui.enabled=false",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one system may take")
    parser.add_argument("--pause", type=float, default=3, help="seconds between two systems")
    args = parser.parse_args()
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        parser.error(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")

    up = uptime()
    folder = Path(tempfile.mkdtemp(prefix="ek-peers-"))
    stamp = str(int(time.time()))
    rows: list[dict[str, Any]] = []
    with bench_broker() as bootstrap:
        source = create_topic(bootstrap, f"peers-in-{stamp}", PARTITIONS)
        run = Run(bootstrap, source, args.records, args.workload, stamp, folder, args.ek_setting)
        prepare(names, run)
        feed_s, value_bytes = feed(bootstrap, source, args.records)
        print(f"fed {args.records:,} bids (mean value {value_bytes:.0f} B) in {feed_s:.1f} s")
        for name in names:
            time.sleep(args.pause)
            result = measure(run, name, SYSTEMS[name], args.timeout)
            result["load_average_1m_after"] = round(os.getloadavg()[0], 2)
            rows.append(result)
            print(json.dumps(result))
    conclude(
        "peers",
        {
            "uptime_before": up,
            "records": args.records,
            "partitions": PARTITIONS,
            "workload": args.workload,
            "mean_value_bytes": round(value_bytes, 1),
            "feed_s": round(feed_s, 1),
            "ek_settings": args.ek_setting,
            "systems": rows,
        },
        markdown(rows, args.workload),
        [r["system"] for r in rows if not r["exact"] or r["exit_code"] != 0],
        folder,
    )


if __name__ == "__main__":
    main()
