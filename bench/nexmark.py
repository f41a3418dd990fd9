"""Nexmark side by side: ethereal-kafka, Spark's own engine and Apache Flink on the same topics, every answer checked.

    flock /tmp/ek-bench.lock nice -n 19 .venv/bin/python bench/nexmark.py                  # 2M events, defaults
    nice -n 19 .venv/bin/python bench/nexmark.py --events 100000 --queries q5 --systems ek,spark,flink-eos
    make bench-nexmark NEXMARK_ARGS="--events 200000 --rounds 2"

**Input.** bench/nexmark_model.py generates Nexmark's persons, auctions and bids and a fourth kind, lines of text
for the windowed word count, until every query has `--events` input events, and writes them once to **one topic per
kind** (2 partitions, the i-th record of a kind to partition i % 2, the record timestamp = the event's time), then
a sentinel per partition 60 s of event time after the kind's last record, so every window holding real records
closes in every engine (see nexmark_model). Every system reads these topics; each run writes a fresh 2-partition
output topic.

**Queries** (`--queries`, default q5, q7, q8, wc; q0-q2 are the stateless ones): q5 hot items (hopping 10 s / 2 s,
the auctions with the most bids), q7 highest bid (tumbling 10 s, the bids with the window's top price), q8 new
sellers (persons ⋈ auctions in one tumbling 10 s window), wc the windowed word count (tumbling 10 s per word).

**Systems** (`--systems`, run one after the other for each query, in this order):

| name | what runs | guarantee |
|---|---|---|
| `ek` | ethereal-kafka, a job file run by `ethereal-kafka run --available-now`, the project's defaults, the queries as Spark-native windows and joins (bench/nexmark_queries.py) | exactly-once |
| `ek-py` | the same with the queries written with the DataStream API's Python functions (`*_py` in bench/nexmark_queries.py) | exactly-once |
| `spark` | Spark's own engine: Structured Streaming, Spark's JVM Kafka source and sink, DataFrame code over `from_json` (bench/nexmark_spark.py), `availableNow` | at-least-once |
| `flink-eos` | Apache Flink 2.2 through PyFlink's SQL API (bench/nexmark_flink.py), parallelism 2, checkpoints every 1 s, transactional Kafka sink | exactly-once |
| `flink-alo` | the same, at-least-once checkpoints and sink | at-least-once |

Spark's Kafka connector jars and Flink (its own virtualenv and Kafka SQL connector jar) are fetched once into the
ethereal-kafka cache (`~/.cache/ethereal-kafka/`), never project dependencies.

**Measured** per run, from the system's process start: a read_committed consumer in this process reads the output as
it is written, decodes every row and counts it against the answer; psutil samples the CPU and RSS of the system's
whole process tree every 0.25 s (bench/common.TreeCpu: PySpark's daemon ignores SIGCHLD, so every process is
summed; the JVMs are in the tree). A run ends when every expected row is readable (then `--available-now` jobs
exit by themselves; Flink, which runs on, is stopped with SIGTERM). Progress is read from the output: each row proves
its query has read its input up to an event time (`nexmark_model.covered`: a window's end plus the watermark's
bound), which counts the input events up to it. Reported:

- *events/s (steady)*: the input events processed after the first `--warmup` seconds (default 30) over the time from
  then to the last expected row; *CPU-s / 1M (steady)*: the tree's CPU over the same window per 1M of those events.
  `n/a` when less than 10 s or 10 % of the input remained after the warm-up (a short or fast run: raise `--events`).
- *events/s (incl. start-up)* and *CPU-s / 1M (incl. start-up)*: all input events over the time (CPU) from the
  process start to the last expected row.
- *peak RSS* (the largest sum of the tree's RSS) and the RSS change over the steady window per 1M events.
- *check*: the output read to its end (read_committed) against the answer: lost, duplicate and unexpected rows.
  Any lost or unexpected row, or a duplicate from an exactly-once system, is **WRONG** and the bench exits non-zero
  (duplicates of an at-least-once system are reported, not wrong).

`uptime` before each run goes into bench/results/nexmark.json (`--result NAME` for another file); a Markdown table
is printed.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nexmark_flink
import nexmark_model as model
import peers_spark
from common import TreeCpu, bench_broker, conclude, uptime
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from nexmark_queries import SQL

from ethereal_kafka.broker.jars import cache_home
from ethereal_kafka.connectors.kafka.topics import create_topic

HERE = Path(__file__).resolve().parent
PARTITIONS = 2
#: Record timestamps far from the broker's clock must not be deleted by retention during the run.
KEEP = {"retention.ms": "-1"}
WHAT = {
    "q0": "passthrough",
    "q1": "currency conversion",
    "q2": "selection",
    "q5": "hot items (hop 10 s / 2 s)",
    "q7": "highest bid (tumble 10 s)",
    "q8": "new sellers (persons ⋈ auctions, tumble 10 s)",
    "wc": "windowed word count (tumble 10 s)",
}
DEFAULT_QUERIES = ("q5", "q7", "q8", "wc")


# -- input ----------------------------------------------------------------------------------------------------------
@dataclass
class Input:
    """What was written: the topic of each kind, the answers, and each kind's event times (sorted, sentinels left
    out) for turning an output row's event time into input events."""

    topics: dict[str, str]
    answers: model.Answers
    times: dict[str, array[int]]
    counts: dict[str, int]

    def events(self, query: str) -> int:
        """The input events of a query (sentinels not counted)."""
        return sum(self.counts[k] for k in model.QUERIES[query])

    def progress(self, query: str, event_time: int) -> int:
        """The query's input events with an event time at or before `event_time`."""
        return sum(bisect.bisect_right(self.times[k], event_time) for k in model.QUERIES[query])


def feed(bootstrap: str, queries: list[str], each: int, seed: int, rate: int, stamp: str) -> Input:
    """Generate the kinds the queries read, write them to their topics (i-th record of a kind to partition i % 2,
    timestamp = event time), then the sentinels; build the answers on the way."""
    kinds = [k for k in model.KINDS if any(k in model.QUERIES[q] for q in queries)]
    counts = {k: n for k, n in model.counts(each).items() if k in kinds}
    # Event time ends 10 minutes ago at the latest, and starts on a whole minute (windows align with it).
    base_ms = (int(time.time()) // 60) * 60_000 - model.span_ms(each, rate) - 600_000
    base_ms -= base_ms % 60_000
    answers = model.Answers(queries)
    times: dict[str, array[int]] = {}
    topics: dict[str, str] = {}
    # Idempotent: a retried request keeps its place, so each partition holds its records in event-time order (the
    # answers assume it). Without it, a first request that timed out on a loaded machine was written after later
    # ones: 1,139 persons of q8's partition 0 landed ~2 min of event time late and every engine dropped them.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "acks": "all",
            "enable.idempotence": True,
        }
    )

    def send(topic: str, value: bytes | str, partition: int, at: int) -> None:
        while True:
            try:
                producer.produce(topic, value, partition=partition, timestamp=at)
                return
            except BufferError:
                producer.poll(0.05)

    for kind in kinds:
        topics[kind] = create_topic(bootstrap, f"nexmark-{kind}-{stamp}", PARTITIONS, KEEP)
        stamps = times[kind] = array("q")
        for i, record in enumerate(model.records(kind, counts[kind], seed, rate, base_ms)):
            send(topics[kind], model.value(kind, record), i % PARTITIONS, record["date_time"])
            answers.add(kind, record)
            stamps.append(record["date_time"])
        end = stamps[-1] + model.SENTINEL_GAP_MS
        for partition in range(PARTITIONS):
            last = model.sentinel(kind, end)
            send(topics[kind], model.value(kind, last), partition, end)
            answers.add(kind, last)
    if producer.flush(300):
        raise SystemExit("the input was not fully written")
    return Input(topics, answers, times, counts)


# -- the systems ----------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """What every system's command is built from."""

    bootstrap: str
    data: Input
    stamp: str
    folder: Path
    ek_settings: list[str]
    flink_checkpoint_ms: int
    ek_source_settings: list[str] = field(default_factory=list)
    spark_jars: list[Path] = field(default_factory=list)
    spark_conf: list[str] = field(default_factory=list)
    flink_python: Path | None = None
    flink_jar: Path | None = None


@dataclass(frozen=True)
class System:
    """A system: its label, guarantee, whether it exits by itself at the end of the input, and its command
    (`command(run, query, output topic, folder)` -> argv)."""

    label: str
    guarantee: str
    exits: bool
    command: Callable[[Run, str, str, Path], list[str]]


def write_ek_job(folder: Path, run: Run, query: str, output: str, pipeline: str) -> Path:
    """The query's ethereal-kafka job file and connector files in `folder`; returns the job file. `run.ek_settings`
    (`key=value`) are appended to the job file, `run.ek_source_settings` to every source's file."""
    folder.mkdir(parents=True, exist_ok=True)
    kinds = model.QUERIES[query]
    for kind in kinds:
        serde = (
            "value.format=string\n"
            if kind == "lines"
            else f"value.format=json\nvalue.schema={model.SCHEMAS[kind]}\n"
        )
        (folder / f"{kind}.properties").write_text(
            f"connector.class=kafka-source\nname={kind}\nbootstrap.servers={run.bootstrap}\n"
            f"topics={run.data.topics[kind]}\nstarting.offsets=earliest\n{serde}"
            + "".join(f"{setting}\n" for setting in run.ek_source_settings)
        )
    (folder / "out.properties").write_text(
        f"connector.class=kafka-sink\nname=out\nbootstrap.servers={run.bootstrap}\ntopic={output}\n"
        "value.format=json\n" + ("value.column=*\n" if query in SQL else "")
    )
    transform = f"transform.sql={SQL[query]}" if query in SQL else f"pipeline=nexmark_queries:{pipeline}"
    (folder / "job.properties").write_text(
        f"app.id=nexmark-{folder.name}-{run.stamp}\nsources={','.join(f'{k}.properties' for k in kinds)}\n"
        f"sinks=out.properties\n{transform}\ncheckpoint.location={folder / 'checkpoint'}\n"
        "delivery.guarantee=exactly-once\n" + "".join(f"{setting}\n" for setting in run.ek_settings)
    )
    return folder / "job.properties"


def _ek(python_functions: bool, python: str = sys.executable) -> Callable[[Run, str, str, Path], list[str]]:
    def command(run: Run, query: str, output: str, folder: Path) -> list[str]:
        pipeline = f"{query}_py" if python_functions and query not in SQL else query
        job = write_ek_job(folder, run, query, output, pipeline)
        return [python, "-m", "ethereal_kafka.cli", "run", str(job), "--available-now"]

    return command


def _topics(run: Run, query: str) -> str:
    return ",".join(f"{k}={run.data.topics[k]}" for k in model.QUERIES[query])


def _spark(run: Run, query: str, output: str, folder: Path) -> list[str]:
    return [
        sys.executable,
        str(HERE / "nexmark_spark.py"),
        *("--query", query, "--bootstrap", run.bootstrap, "--topics", _topics(run, query)),
        *("--output", output, "--checkpoint", str(folder / "checkpoint")),
        *("--jars", ",".join(str(j) for j in run.spark_jars)),
        *[arg for setting in run.spark_conf for arg in ("--conf", setting)],
    ]


def _flink(guarantee: str) -> Callable[[Run, str, str, Path], list[str]]:
    def command(run: Run, query: str, output: str, folder: Path) -> list[str]:
        assert run.flink_python is not None and run.flink_jar is not None
        return [
            str(run.flink_python),
            str(HERE / "nexmark_flink.py"),
            *("--query", query, "--bootstrap", run.bootstrap, "--topics", _topics(run, query)),
            *("--output", output, "--guarantee", guarantee, "--jar", str(run.flink_jar)),
            *(
                "--name",
                f"nexmark-{folder.name}-{run.stamp}",
                "--checkpoint-ms",
                str(run.flink_checkpoint_ms),
            ),
        ]

    return command


SYSTEMS: dict[str, System] = {
    "ek": System("**ethereal-kafka** (Spark-native operators)", "exactly-once", True, _ek(False)),
    "ek-py": System("**ethereal-kafka** (DataStream, Python functions)", "exactly-once", True, _ek(True)),
    "spark": System("Spark's own engine (JVM Kafka source+sink)", "at-least-once", True, _spark),
    "flink-eos": System("Apache Flink 2.2 SQL", "exactly-once", False, _flink("exactly-once")),
    "flink-alo": System("Apache Flink 2.2 SQL", "at-least-once", False, _flink("at-least-once")),
}
DEFAULT_SYSTEMS = ("ek", "ek-py", "spark", "flink-eos", "flink-alo")


def prepare(names: list[str], run: Run) -> None:
    """Fetch what the chosen systems need into `run` before anything is timed: Spark's Kafka connector jars,
    Flink's virtualenv and Kafka SQL connector."""
    if "spark" in names:
        import pyspark

        version, run.spark_jars = peers_spark.connector_jars(cache_home(), pyspark.__version__)
        print(f"Spark's Kafka connector {version}: {len(run.spark_jars)} jars")
    if any(n.startswith("flink") for n in names):
        run.flink_python = nexmark_flink.ensure_venv(cache_home())
        run.flink_jar = nexmark_flink.connector_jar(cache_home())
        print(f"PyFlink in {run.flink_python.parent.parent}, {run.flink_jar.name}")


# -- watching the output --------------------------------------------------------------------------------------------
class OutputWatcher:
    """Reads a run's output topic read_committed on a thread, decodes each row and counts it against the answer.

    Marks (monotonic time, tree CPU, input events proven processed) when the warm-up ends (`at_warm`) and when the
    last expected row became readable (`at_done`, also sets `done`). `finish()`, called once the system exited,
    reads on to the partitions' last stable offsets (or until `drain_s` without a record) and stops the thread.
    """

    def __init__(
        self, bootstrap: str, topic: str, query: str, data: Input, cpu: TreeCpu, began: float, warmup_s: float
    ) -> None:
        self.bootstrap, self.topic, self.query, self.data = bootstrap, topic, query, data
        self.cpu, self.began, self.warmup_s = cpu, began, warmup_s
        self.expected = data.answers.answer(query)
        self.expected_total = sum(self.expected.values())
        self.got: Counter[tuple[Any, ...]] = Counter()
        self.matched = 0
        self.undecodable = 0
        self.covered = -(2**62)
        self.first_row: float | None = None
        self.at_warm: tuple[float, float, int] | None = None
        self.at_done: tuple[float, float, int] | None = None
        self.done = threading.Event()
        self.drain_s = 60.0
        self._ready = threading.Event()
        self._finishing = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Start reading; returns once the consumer has its partitions."""
        self._thread.start()
        if not self._ready.wait(60):
            raise SystemExit(f"the output reader of {self.topic} did not start")
        if self.expected_total == 0:
            raise SystemExit(f"{self.query}: the answer is empty (too few events?)")

    def finish(self) -> None:
        """Read what is left up to the end of the topic, then stop."""
        self._finishing.set()
        self._thread.join()

    def _mark(self, now: float) -> tuple[float, float, int]:
        self.cpu.sample()
        return (now, self.cpu.seconds, self.data.progress(self.query, self.covered))

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"nexmark-watch-{time.time_ns()}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
            }
        )
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        consumer.consume(1, timeout=0.5)  # the topic is empty: connects and fetches metadata
        self._ready.set()
        ends: dict[int, int] | None = None
        idle_since = time.monotonic()
        while True:
            messages = consumer.consume(10_000, timeout=0.05)
            now = time.monotonic()
            self._count(messages)
            if messages:
                idle_since = now
                if self.first_row is None:
                    self.first_row = now
            if self.at_warm is None and now - self.began >= self.warmup_s:
                self.at_warm = self._mark(now)
            if self.at_done is None and self.matched >= self.expected_total:
                self.at_done = self._mark(now)
                self.done.set()
            if not self._finishing.is_set():
                continue
            if ends is None:  # a read_committed consumer's end offsets are the last stable offsets
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

    def _count(self, messages: list[Any]) -> None:
        for message in messages:
            if message.error():
                continue
            try:
                key = model.row(self.query, json.loads(message.value() or b"null"))
                at = model.covered(self.query, key)
            except (ValueError, TypeError, AttributeError):
                self.undecodable += 1
                continue
            self.got[key] += 1
            if self.got[key] <= self.expected.get(key, 0):
                self.matched += 1
            self.covered = max(self.covered, at)


def measure(
    run: Run, query: str, name: str, system: System, args: argparse.Namespace, round_: int
) -> dict[str, Any]:
    """Run one system on one query to the last expected row, measure it and check its output (module docstring)."""
    folder = run.folder / f"{query}-{name}-r{round_}"
    folder.mkdir(parents=True, exist_ok=True)
    output = create_topic(run.bootstrap, f"nexmark-{query}-{name}-out-{run.stamp}-r{round_}", PARTITIONS)
    argv = system.command(run, query, output, folder)
    env = {
        **os.environ,
        "ETHEREAL_KAFKA_STATE": str(folder / "state"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    before = uptime()
    log = folder / "run.log"
    began = time.monotonic()
    with log.open("wb") as sink:
        # cwd: `python -m ethereal_kafka.cli` would import the package from the bench's working directory (a
        # checkout) before the interpreter's own install (`--ek-build`).
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=folder
        )
    cpu = TreeCpu(process.pid)
    watcher = OutputWatcher(run.bootstrap, output, query, run.data, cpu, began, args.warmup)
    stopped = False
    code: int | None = None
    try:
        with cpu:
            watcher.start()
            deadline = began + args.timeout
            while code is None and time.monotonic() < deadline:
                if not system.exits and watcher.done.wait(0):
                    time.sleep(2)  # a last checkpoint's rows: an at-least-once system may write some twice
                    os.killpg(process.pid, signal.SIGTERM)
                    stopped = True
                    code = cpu.reap(process, 30)
                    break
                code = cpu.reap(process, 0.5)
            if code is None:
                print(f"{query} {name}: still running, killed", file=sys.stderr)
                os.killpg(process.pid, signal.SIGKILL)
                code = cpu.reap(process, 60)
            exited = time.monotonic()
            cpu_total = cpu.seconds
            leftovers = cpu.follow(30)
    except BaseException:
        if process.poll() is None:  # the bench failed (or was interrupted): the system must not outlive it
            os.killpg(process.pid, signal.SIGKILL)
        raise
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    watcher.finish()
    return row(query, name, system, run, watcher, cpu, began, exited, code, stopped, cpu_total, before, log)


def row(
    query: str,
    name: str,
    system: System,
    run: Run,
    watcher: OutputWatcher,
    cpu: TreeCpu,
    began: float,
    exited: float,
    code: int | None,
    stopped: bool,
    cpu_total: float,
    before: str,
    log: Path,
) -> dict[str, Any]:
    """One run's result from what the watcher and the sampler saw."""
    events = run.data.events(query)
    check = model.compare(watcher.expected, watcher.got)
    ended_ok = code == 0 or (stopped and watcher.at_done is not None)
    exact = (
        ended_ok
        and check["lost"] == check["unexpected"] == watcher.undecodable == 0
        and (check["duplicates"] == 0 or system.guarantee != "exactly-once")
    )
    done_at, done_cpu, _ = watcher.at_done or (exited, cpu_total, events)
    result: dict[str, Any] = {
        "query": query,
        "what": WHAT[query],
        "system": name,
        "label": system.label,
        "guarantee": system.guarantee,
        "uptime_before": before,
        "exit_code": code,
        "stopped_by_bench": stopped,
        "events": events,
        "wall_s": round(exited - began, 1),
        "first_output_s": None if watcher.first_row is None else round(watcher.first_row - began, 1),
        "last_output_s": round(done_at - began, 1),
        "events_per_s": round(events / (done_at - began)),
        "cpu_s": round(done_cpu, 1),
        "cpu_s_with_shutdown": round(cpu_total, 1),
        "cpu_s_per_1m": round(done_cpu / events * 1e6, 1),
        "cpu_s_by_process": cpu.by_kind(),
        "peak_rss_mb": round(cpu.peak_rss / 2**20),
        "events_per_s_steady": None,
        "cpu_s_per_1m_steady": None,
        "rss_change_mb_per_1m_steady": None,
        "check": check,
        "undecodable": watcher.undecodable,
        "exact": exact,
        "log": str(log),
    }
    if watcher.at_warm is not None and watcher.at_done is not None:
        warm_at, warm_cpu, warm_events = watcher.at_warm
        remaining = events - warm_events
        seconds = done_at - warm_at
        result["events_at_warmup_end"] = warm_events
        if seconds >= 10 and remaining >= 0.1 * events:
            result["events_per_s_steady"] = round(remaining / seconds)
            result["cpu_s_per_1m_steady"] = round((done_cpu - warm_cpu) / remaining * 1e6, 1)
            rss = cpu.rss_between(warm_at, done_at)
            if rss is not None:
                result["rss_steady_mb"] = [round(rss[0] / 2**20), round(rss[1] / 2**20)]
                result["rss_change_mb_per_1m_steady"] = round((rss[1] - rss[0]) / 2**20 / remaining * 1e6, 1)
    return result


# -- report ---------------------------------------------------------------------------------------------------------
def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def markdown(rows: list[dict[str, Any]]) -> str:
    """One line per query, system and round."""
    lines = [
        "| query | system | guarantee | round | events | events/s (steady) | events/s (incl. start-up) "
        "| CPU-s / 1M (steady) | CPU-s / 1M (incl. start-up) | peak RSS | RSS change / 1M (steady) | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["check"]
        verdict = f"exact ({c['written']:,} rows)" if r["exact"] and not c["duplicates"] else ""
        if r["exact"] and c["duplicates"]:
            verdict = f"{c['duplicates']:,} duplicates (at-least-once)"
        if not r["exact"]:
            verdict = (
                f"**WRONG** (exit {r['exit_code']}, lost {c['lost']}, duplicates {c['duplicates']}, "
                f"unexpected {c['unexpected']}, undecodable {r['undecodable']})"
            )
        change = r["rss_change_mb_per_1m_steady"]
        lines.append(
            f"| {r['query']} {r['what']} | {r['label']} | {r['guarantee']} | {r['round']} | {r['events']:,} "
            f"| {_num(r['events_per_s_steady'])} | {_num(r['events_per_s'])} | {_num(r['cpu_s_per_1m_steady'])} "
            f"| {_num(r['cpu_s_per_1m'])} | {r['peak_rss_mb'] / 1024:.2f} GB "
            f"| {'n/a' if change is None else f'{change} MB'} | {verdict} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=2_000_000, help="input events of each query")
    parser.add_argument(
        "--queries", default=",".join(DEFAULT_QUERIES), help="comma-separated, run in this order"
    )
    parser.add_argument(
        "--systems", default=",".join(DEFAULT_SYSTEMS), help=f"comma-separated; known: {', '.join(SYSTEMS)}"
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of every query and system")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--rate", type=int, default=1000, help="events per second of event time")
    parser.add_argument("--warmup", type=float, default=30, help="seconds before the steady window")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    parser.add_argument("--pause", type=float, default=3, help="seconds between two runs")
    parser.add_argument("--flink-checkpoint-ms", type=int, default=1000)
    parser.add_argument("--result", default="nexmark", help="bench/results/<name>.json")
    parser.add_argument(
        "--ek-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a job setting added to every ethereal-kafka job file (repeatable), e.g. epoch.target.ms=10000",
    )
    parser.add_argument(
        "--ek-source-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a source setting added to every ethereal-kafka source file (repeatable), e.g. "
        "max.records.per.epoch=200000",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the `spark` system",
    )
    parser.add_argument(
        "--ek-build",
        action="append",
        default=[],
        metavar="LABEL=PYTHON",
        help="adds the system `ek-LABEL`: `ek` run by another interpreter (e.g. a virtualenv of another commit, "
        "for a before/after in one invocation)",
    )
    args = parser.parse_args()
    for build in args.ek_build:
        label, python = build.split("=", 1)
        SYSTEMS[f"ek-{label}"] = System(
            f"**ethereal-kafka** {label}", "exactly-once", True, _ek(False, python)
        )
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = [q for q in queries if q not in model.QUERIES] + [n for n in names if n not in SYSTEMS]
    if unknown:
        parser.error(f"unknown {unknown}; queries: {', '.join(model.QUERIES)}; systems: {', '.join(SYSTEMS)}")

    # SIGTERM unwinds like Ctrl-C: the running system is killed and the bench's broker stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    at_start = uptime()
    folder = Path(tempfile.mkdtemp(prefix="ek-nexmark-"))
    stamp = str(int(time.time()))
    rows: list[dict[str, Any]] = []
    with bench_broker() as bootstrap:
        began = time.monotonic()
        data = feed(bootstrap, queries, args.events, args.seed, args.rate, stamp)
        run = Run(
            bootstrap,
            data,
            stamp,
            folder,
            args.ek_setting,
            args.flink_checkpoint_ms,
            ek_source_settings=args.ek_source_setting,
            spark_conf=args.spark_conf,
        )
        prepare(names, run)
        print(
            f"fed {', '.join(f'{n:,} {k}' for k, n in data.counts.items())} in {time.monotonic() - began:.0f} s"
        )
        for round_ in range(1, args.rounds + 1):
            for query in queries:
                for name in names:
                    time.sleep(args.pause)
                    result = measure(run, query, name, SYSTEMS[name], args, round_)
                    result["round"] = round_
                    rows.append(result)
                    print(json.dumps(result), flush=True)
    conclude(
        args.result,
        {
            "uptime_at_start": at_start,
            "events_per_query": args.events,
            "events_by_kind": run.data.counts,
            "seed": args.seed,
            "rate": args.rate,
            "warmup_s": args.warmup,
            "ek_settings": args.ek_setting,
            "ek_source_settings": args.ek_source_setting,
            "spark_conf": args.spark_conf,
            "flink_checkpoint_ms": args.flink_checkpoint_ms,
            "partitions": PARTITIONS,
            "runs": rows,
        },
        markdown(rows),
        [f"{r['query']} {r['system']} (round {r['round']})" for r in rows if not r["exact"]],
        folder,
    )


if __name__ == "__main__":
    main()
