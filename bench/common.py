"""Shared bench helpers: a broker for the run, a memory sampler of the process tree, result files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

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


class Periodic:
    """Calls `sample()` every `interval_s` on a thread while used as a context manager (subclasses define it)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        """Take one sample (overridden)."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class MemorySampler(Periodic):
    """Samples the RSS of this process tree every `interval_s` on a thread; keeps the peak of the sum."""

    def __init__(self, interval_s: float = 0.5) -> None:
        super().__init__(interval_s)
        self.peak_total = 0
        self.peak_by_kind: dict[str, int] = {}

    def sample(self) -> None:
        """Read the tree's RSS now; keep it if its sum is the largest so far."""
        sample = _tree_rss(os.getpid())
        total = sum(sample.values())
        if total > self.peak_total:
            self.peak_total = total
            self.peak_by_kind = sample


class TreeCpu(Periodic):
    """CPU-seconds (user + system) and peak RSS of a process and all its descendants, sampled with psutil every
    `interval_s` on a thread.

    PySpark's Python daemon ignores SIGCHLD, so its workers' CPU never reaches the parent's `RUSAGE_CHILDREN`: each
    process of the tree is sampled instead, and its largest value kept (keyed by pid and start time, so a reused pid
    is a new process). `sample()` may be called from any thread (the samples are serialised). Call `reap()` instead
    of waiting for the root yourself: it takes the last sample while the exited root is still a zombie.
    """

    def __init__(self, root: int, interval_s: float = 0.25) -> None:
        super().__init__(interval_s)
        self.root = root
        self.seen: dict[tuple[int, float], float] = {}
        #: Each process's kind (`by_kind`): its `process_role`.
        self.kinds: dict[tuple[int, float], str] = {}
        #: The largest sum of the tree's RSS over the samples, in bytes (pages shared by forked workers count once
        #: per process, as `ps` shows them).
        self.peak_rss = 0
        #: CPU of the root and of the descendants it waited for, read from the exited root (`reap`): a lower bound
        #: that catches the last moments of children that exited between two samples.
        self.waited = 0.0
        #: (monotonic time, the tree's RSS in bytes) of every sample.
        self.rss_series: list[tuple[float, int]] = []
        self._lock = threading.Lock()

    def sample(self) -> None:
        """Read the CPU time and RSS of every process in the tree now."""
        import psutil

        with self._lock:
            try:
                root = psutil.Process(self.root)
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            rss = 0
            for process in tree:
                try:
                    with process.oneshot():
                        times = process.cpu_times()
                        key = (process.pid, process.create_time())
                        rss += process.memory_info().rss
                        if (
                            self.kinds.get(key, "other") == "other"
                        ):  # a launcher script may exec the JVM later
                            self.kinds[key] = process_role(process, self.root)
                except psutil.Error:
                    continue
                self.seen[key] = max(self.seen.get(key, 0.0), times.user + times.system)
            self.peak_rss = max(self.peak_rss, rss)
            self.rss_series.append((time.monotonic(), rss))

    def reap(self, process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
        """Wait up to `timeout_s` for `process` (the root) to exit, take the last sample of the tree before it is
        reaped (and the CPU it accounts for its waited-for children), then reap it.

        Returns:
            Its exit code, or None when it is still running after `timeout_s` (nothing reaped).
        """
        import psutil

        deadline = time.monotonic() + timeout_s
        while os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        self.sample()
        try:
            times = psutil.Process(process.pid).cpu_times()
            self.waited = times.user + times.system + times.children_user + times.children_system
        except psutil.Error:
            pass
        return process.wait()

    def follow(self, timeout_s: float) -> list[int]:
        """After `reap`: keep sampling the processes seen in the tree (a JVM that outlives its Python driver for a
        moment, workers orphaned by their daemon) until they have all exited, at most `timeout_s`.

        Returns:
            The pids of those still running then (the caller decides whether to end them).
        """
        import psutil

        deadline = time.monotonic() + timeout_s
        while True:
            alive = []
            with self._lock:
                for pid, started in list(self.seen):
                    try:
                        process = psutil.Process(pid)
                        if process.create_time() != started or process.status() == psutil.STATUS_ZOMBIE:
                            continue
                        times = process.cpu_times()
                    except psutil.Error:
                        continue
                    key = (pid, started)
                    self.seen[key] = max(self.seen[key], times.user + times.system)
                    alive.append(pid)
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.1)

    def rss_between(self, start: float, end: float, span_s: float = 5.0) -> tuple[float, float] | None:
        """The tree's mean RSS over the first and over the last `span_s` seconds of the samples taken between
        `start` and `end` (monotonic times), or None without samples there."""
        with self._lock:
            inside = [(t, rss) for t, rss in self.rss_series if start <= t <= end]
        if not inside:
            return None
        head = [rss for t, rss in inside if t <= inside[0][0] + span_s]
        tail = [rss for t, rss in inside if t >= inside[-1][0] - span_s]
        return sum(head) / len(head), sum(tail) / len(tail)

    @property
    def seconds(self) -> float:
        """CPU-seconds of the tree so far: the sum over every process sampled, or what the exited root accounts for
        itself and its waited-for children, whichever is larger (both can only miss CPU, never count it twice)."""
        with self._lock:
            return max(sum(self.seen.values()), self.waited)

    def by_kind(self) -> dict[str, float]:
        """CPU-seconds so far per process kind (see `kinds`), rounded to 0.1 s."""
        with self._lock:
            totals: dict[str, float] = {}
            for key, seconds in self.seen.items():
                kind = self.kinds.get(key, "other")
                totals[kind] = totals.get(kind, 0.0) + seconds
        return {kind: round(seconds, 1) for kind, seconds in sorted(totals.items())}


def drained(app_id: str) -> tuple[list[Any], int, float]:
    """The committed epochs of an app's run (from its checkpoint history, in epoch order), the records they read and
    the seconds from the first epoch's start to the last one's commit (Spark start-up excluded)."""
    from ethereal_kafka.checkpoint.history import CheckpointHistory

    with CheckpointHistory(app_id, read_only=True) as history:
        epochs = sorted((r for r in history.records() if r.outcome == "committed"), key=lambda r: r.epoch)
    first = min(r.started_ms for r in epochs)
    last = max(r.started_ms + r.duration_ms for r in epochs)
    return epochs, sum(max(0, r.records_in) for r in epochs), (last - first) / 1000


def query_epochs(checkpoint: Path) -> tuple[int, float, float]:
    """A finished run's epochs, read from the Spark checkpoint of its query (the one folder under `checkpoint`
    besides `sources`): the number of epochs planned, when the first was planned (its offsets file was written) and
    when the last commit was written (both `time.time()` seconds)."""
    query = next(p for p in checkpoint.iterdir() if p.is_dir() and p.name != "sources")
    offsets = [p for p in (query / "offsets").iterdir() if p.name.isdigit()]
    commits = [p for p in (query / "commits").iterdir() if p.name.isdigit()]
    first = min(offsets, key=lambda p: int(p.name)).stat().st_mtime
    return len(offsets), first, max(p.stat().st_mtime for p in commits)


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


#: The kinds of process in an ethereal-kafka run's tree, as `process_role` names them.
ROLES = (
    "driver",
    "jvm",
    "worker daemon",
    "python workers",
    "fork server",
    "source runner",
    "planners",
    "other",
)


def process_role(process: Any, root: int) -> str:
    """What a process of an ethereal-kafka run's tree is (one of `ROLES`), from its pid, parent and command line:
    the root is the driver (`ethereal-kafka run`); Spark's JVM; the Python worker daemon the JVM starts (its
    command line names `pyspark.worker`) and the workers it forks (same command line, the daemon as parent);
    the fork server of a local session (`runtime.fork_server`) and what it forks, told apart by process name
    (their command line is the server's): the Python data source's streaming source runner and the planners
    (`pyspark.sql.worker.*`: data source creation and read planning, each with a daemon of its own), which keep
    their own command lines when Spark starts them itself; anything else."""
    import psutil

    if process.pid == root:
        return "driver"
    try:
        name = process.name()
        cmdline = " ".join(process.cmdline())
        parent = process.parent()
        parent_name = parent.name() if parent is not None else ""
    except psutil.Error:
        return "other"
    if name.startswith("java"):
        return "jvm"
    if "ethereal_kafka.runtime.fork_server" in cmdline:  # the server and its children, by process name
        if name == "worker-daemon":  # the daemon's workers keep its name
            return "python workers" if parent_name == "worker-daemon" else "worker daemon"
        return {
            "fork-server": "fork server",
            "source-runner": "source runner",
            "planner-daemon": "planners",
        }.get(name, "other")
    if "python_streaming_source_runner" in cmdline:
        return "source runner"
    if "pyspark.sql.worker." in cmdline:
        return "planners"
    if "pyspark.worker" in cmdline or "pyspark.daemon" in cmdline:
        return "worker daemon" if parent_name.startswith("java") else "python workers"
    return "other"


def _spawned_by_the_jvm(process: Any) -> bool:
    """A child the JVM is starting (Java's `posix_spawn`/`vfork`): until it execs it is a `java` process under the
    JVM showing the JVM's own RSS and PSS (seen in issue 25's runs: a peak sample with the JVM counted twice)."""
    parent = process.parent()
    return bool(process.name().startswith("java") and parent is not None and parent.name().startswith("java"))


class RoleSampler(Periodic):
    """Samples the memory of a process tree every `interval_s` on a thread, summed by `process_role`: `samples` is
    a list of (wall-clock ms, {role: RSS bytes}), the roles absent from a sample holding no process then;
    `pss_samples` the same with each process's PSS (proportional set size: a page shared by n processes counts 1/n
    to each, so forked workers' pages shared with their daemon count once over the tree); `most` the most processes
    of each role seen in one sample; `cpu_by_role()` the CPU-seconds (user + system) of each role, each process's
    largest sampled value (a process's last second before it exits is missed)."""

    def __init__(self, root: int, interval_s: float = 1.0) -> None:
        super().__init__(interval_s)
        self.root = root
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.pss_samples: list[tuple[float, dict[str, int]]] = []
        self.most: dict[str, int] = {}
        self._roles: dict[tuple[int, float], str] = {}
        self._cpu: dict[tuple[int, float], float] = {}

    def sample(self) -> None:
        """Read the RSS and PSS of every process in the tree now (a process's role is decided once it is known)."""
        import psutil

        try:
            root = psutil.Process(self.root)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        by_role: dict[str, int] = {}
        pss_by_role: dict[str, int] = {}
        count: dict[str, int] = {}
        for process in tree:
            try:
                key = (process.pid, process.create_time())
                if key not in self._roles and _spawned_by_the_jvm(process):
                    continue  # shares the JVM's pages until it execs: counting it would count the JVM twice
                memory = process.memory_full_info()
                times = process.cpu_times()
            except psutil.Error:
                continue
            self._cpu[key] = max(self._cpu.get(key, 0.0), times.user + times.system)
            role = self._roles.get(key) or process_role(process, self.root)
            # "other" is looked at again: Spark's launcher script becomes the JVM by exec (same pid, same start)
            if role != "other":
                self._roles[key] = role
            by_role[role] = by_role.get(role, 0) + memory.rss
            pss_by_role[role] = pss_by_role.get(role, 0) + memory.pss
            count[role] = count.get(role, 0) + 1
        for role, n in count.items():
            self.most[role] = max(self.most.get(role, 0), n)
        if by_role:
            now = time.time() * 1000
            self.samples.append((now, by_role))
            self.pss_samples.append((now, pss_by_role))

    def cpu_by_role(self) -> dict[str, float]:
        """CPU-seconds so far of each role (a process whose role was never decided counts as "other")."""
        totals: dict[str, float] = {}
        for key, seconds in self._cpu.items():
            role = self._roles.get(key, "other")
            totals[role] = totals.get(role, 0.0) + seconds
        return {role: round(seconds, 1) for role, seconds in totals.items()}


def uptime() -> str:
    """`uptime`'s line (the load before a run goes into its result), printed as well."""
    line = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    print(f"uptime: {line}", flush=True)
    return line


def conclude(name: str, result: dict[str, object], text: str, wrong: list[str], folder: Path) -> None:
    """End a bench: write `result` (with `command` and `markdown` = `text`) to bench/results/<name>.json, print
    `text`, then exit non-zero naming `wrong` (the runs that failed or were inexact; their logs stay in `folder`),
    or remove `folder`."""
    import shutil
    import sys

    path = write_result(
        name, {"command": " ".join([Path(sys.executable).name, *sys.argv]), **result, "markdown": text}
    )
    print(text)
    print(f"written to {path}")
    if wrong:
        raise SystemExit(f"failed or inexact: {', '.join(wrong)} (logs under {folder})")
    shutil.rmtree(folder, ignore_errors=True)
