"""Shared bench helpers: a broker for the run, a memory sampler of the process tree, result files."""

from __future__ import annotations

import json
import os
import platform
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ethereal_kafka.broker import BrokerSettings, LocalBroker

RESULTS = Path(__file__).resolve().parent / "results"


@contextmanager
def bench_broker() -> Iterator[str]:
    """Yield a bootstrap address: `ETHEREAL_KAFKA_BOOTSTRAP` if set, else a fresh local broker (stopped after)."""
    external = os.environ.get("ETHEREAL_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    broker = LocalBroker(
        BrokerSettings(
            name="bench", state_dir=Path(tempfile.mkdtemp(prefix="ek-bench-")) / "broker", heap="1g"
        )
    )
    status = broker.start()
    try:
        assert status.bootstrap is not None
        yield status.bootstrap
    finally:
        broker.destroy()


def _tree_rss(root: int) -> dict[str, int]:
    """RSS in bytes of `root` and its descendants, summed by kind (python / java / other)."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(pid)
        names[pid] = name
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss[pid] = int(line.split()[1]) * 1024
    total: dict[str, int] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        kind = (
            "java"
            if names.get(pid, "").startswith("java")
            else ("python" if names.get(pid, "").startswith("python") else "other")
        )
        total[kind] = total.get(kind, 0) + rss.get(pid, 0)
    return total


class MemorySampler:
    """Samples the RSS of this process tree every `interval_s` on a thread; keeps the peak of the sum."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.peak_total = 0
        self.peak_by_kind: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sample = _tree_rss(os.getpid())
            total = sum(sample.values())
            if total > self.peak_total:
                self.peak_total = total
                self.peak_by_kind = sample
            self._stop.wait(self.interval_s)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class TreeCpu:
    """CPU-seconds (user + system) of a process and all its descendants, sampled with psutil every `interval_s`.

    PySpark's Python daemon ignores SIGCHLD, so its workers' CPU never reaches the parent's `RUSAGE_CHILDREN`: each
    process of the tree is sampled instead, and its last value kept (keyed by pid and start time, so a reused pid
    is a new process). Call `sample()` once more just before the root exits for the last increments.
    """

    def __init__(self, root: int, interval_s: float = 0.25) -> None:
        self.root = root
        self.interval_s = interval_s
        self.seen: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def sample(self) -> None:
        """Read the CPU time of every process in the tree now."""
        import psutil

        try:
            root = psutil.Process(self.root)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for process in tree:
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    key = (process.pid, process.create_time())
            except psutil.Error:
                continue
            self.seen[key] = max(self.seen.get(key, 0.0), times.user + times.system)

    @property
    def seconds(self) -> float:
        """CPU-seconds of every process seen so far."""
        return sum(self.seen.values())

    def __enter__(self) -> TreeCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def drained(app_id: str) -> tuple[list[Any], int, float]:
    """The committed epochs of an app's run (from its checkpoint history, in epoch order), the records they read and
    the seconds from the first epoch's start to the last one's commit (Spark start-up excluded)."""
    from ethereal_kafka.checkpoint.history import CheckpointHistory

    with CheckpointHistory(app_id, read_only=True) as history:
        epochs = sorted((r for r in history.records() if r.outcome == "committed"), key=lambda r: r.epoch)
    first = min(r.started_ms for r in epochs)
    last = max(r.started_ms + r.duration_ms for r in epochs)
    return epochs, sum(max(0, r.records_in) for r in epochs), (last - first) / 1000


def percentiles(values: list[float], points: tuple[float, ...] = (50, 95, 99)) -> dict[str, float]:
    """Nearest-rank percentiles of `values` (empty → {})."""
    if not values:
        return {}
    ordered = sorted(values)
    return {
        f"p{int(p)}": ordered[min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1)] for p in points
    }


def write_result(name: str, result: dict[str, object]) -> Path:
    """Write `result` (plus machine facts) to `bench/results/<name>.json` and return the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {
        "bench": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        **result,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path
