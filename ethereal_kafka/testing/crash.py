"""The crash harness: run a job as a separate process, SIGKILL it at random moments inside its epochs, restart it,
until it has consumed its input; then compare what a read_committed consumer sees with the expected output.

    python -m ethereal_kafka.testing.crash JOB.properties --kills 10 --seed 7 --expected F --bootstrap B --topic T

Kills are timed on the job's progress (after each run's first committed epoch), so every one lands inside the
protocol rather than in a JVM's start-up, and each is reported with where it landed. The kill takes the whole
process group (driver, Spark JVM, Python workers), as a machine crash would. The last line printed is
`records=N duplicates=D lost=L kills=K`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ethereal_kafka import faults
from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.runtime.fork_server import PROCESS_NAMES, SERVER_NAME
from ethereal_kafka.testing.spark_cluster import session_pids


class HarnessError(EtherealKafkaError):
    """A job run failed for a reason other than the harness's kill (exit code, timeout)."""


@dataclass(frozen=True)
class CrashRun:
    """What the harness did; `landed` says where each kill landed (see `describe_kill`)."""

    kills: int
    runs: int
    seconds: float
    log: Path
    landed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Output compared with the expected output (multisets of records)."""

    records: int
    duplicates: int
    lost: int
    unexpected: int

    def line(self, kills: int) -> str:
        """The harness's summary line."""
        return f"records={self.records} duplicates={self.duplicates} lost={self.lost} kills={kills}"


def compare(expected: Iterable[object], actual: Iterable[object]) -> Comparison:
    """Count duplicates (extra copies of expected records), losses and records that were never expected."""
    want = Counter(expected)
    got = Counter(actual)
    duplicates = sum(max(0, got[r] - want[r]) for r in got if r in want)
    lost = sum(max(0, want[r] - got[r]) for r in want)
    unexpected = sum(n for r, n in got.items() if r not in want)
    return Comparison(sum(got.values()), duplicates, lost, unexpected)


def run_with_kills(
    job: str | Path,
    kills: int,
    seed: int,
    window_s: tuple[float, float] = (0.0, 0.8),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 900.0,
    log: Path | None = None,
    epochs_before_kill: tuple[int, int] = (0, 1),
    first_commit_timeout_s: float = 240.0,
    final_env: Mapping[str, str] | None = None,
) -> CrashRun:
    """Run `ethereal-kafka run JOB --available-now` until it exits 0, SIGKILLing each of the first `kills` runs
    inside the protocol, then let the last run finish.

    A kill is timed on the job's own progress, not on the clock of a starting JVM: once every query of the run has
    committed an epoch (a new file in each query's Spark commit log: start-up and recovery are over), the harness
    waits for `randint(*epochs_before_kill)` more epochs to be planned (new files in the offset logs), then
    `uniform(*window_s)` seconds, and kills the whole process group. Each kill is recorded with where it landed
    (`CrashRun.landed`): the epoch in flight, its transactions (from the sink tasks' fault trace) and whether Spark
    had committed it.

    `env` is added to the environment of every run; `final_env`, when given, replaces it for the last run, the one
    the harness lets finish: no kill is aimed at it, so a test drops its fault delays there and may let it read in
    larger epochs (a replayed epoch still reads its logged range; only epochs planned after the last kill grow).

    Raises:
        HarnessError: a run exited non-zero by itself; a run finished (its input consumed) before the harness
            could kill it `kills` times (give the job more input or smaller epochs); no epoch committed within
            `first_commit_timeout_s`; or the whole harness exceeded `timeout_s`.
    """
    from ethereal_kafka.config.job import load_job

    rng = random.Random(seed)
    log_path = log or Path(f"/tmp/ethereal-crash-{os.getpid()}.log")
    root = Path(load_job(job).job.checkpoint_location)
    trace = log_path.with_suffix(".trace")
    began = time.monotonic()
    done_kills = runs = 0
    landed: list[str] = []
    cmd = [sys.executable, "-m", "ethereal_kafka.cli", "run", str(job), "--available-now"]
    run_env = {**os.environ, **(env or {}), faults.TRACE_ENV: str(trace)}
    last_env = run_env if final_env is None else {**os.environ, **final_env, faults.TRACE_ENV: str(trace)}
    with log_path.open("ab") as out:
        while True:
            runs += 1
            out.write(f"\n=== run {runs} (kills so far {done_kills}) ===\n".encode())
            out.flush()
            before = _log_files(root, "commits")
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=run_env if done_kills < kills else last_env,
                start_new_session=True,
            )
            started = time.monotonic()
            if done_kills < kills:
                moment = _kill_moment(
                    proc, root, trace, before, rng, window_s, epochs_before_kill, first_commit_timeout_s
                )
                if moment is not None:
                    target, cpu = moment
                    where = describe_kill(root, trace)
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    _wait_group_gone(proc.pid)
                    done_kills += 1
                    landed.append(
                        f"kill {done_kills} (run {runs}, {time.monotonic() - started:.1f}s after its start, aimed at "
                        f"{target}; {describe_cpu(cpu)}): {where}"
                    )
                    out.write(f"=== SIGKILL {landed[-1]}\n".encode())
                    out.flush()
                    _check_deadline(began, timeout_s, done_kills, log_path)
                    continue
                code = proc.wait()
                _wait_group_gone(proc.pid)
                if code == 0:
                    raise HarnessError(
                        f"run {runs} consumed the whole input after {done_kills} of {kills} kills: give the job "
                        f"more input or smaller epochs (log {log_path})"
                    )
                raise HarnessError(f"run {runs} exited with {code} (log {log_path})")
            try:
                code = proc.wait(timeout=max(60.0, timeout_s - (time.monotonic() - began)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise HarnessError(f"final run did not finish (log {log_path})") from None
            _wait_group_gone(proc.pid)
            if code != 0:
                raise HarnessError(f"run {runs} exited with {code} (log {log_path})")
            return CrashRun(done_kills, runs, time.monotonic() - began, log_path, tuple(landed))


def session_cpu(session: int) -> dict[str, float]:
    """CPU-seconds (user + system, with reaped children's) of the live processes of `session`, by kind: `jvm`,
    `driver` (the `ethereal-kafka` process), the module a Python process runs with `-m` (PySpark's
    `python_streaming_source_runner`, `daemon`, the framework's `worker_daemon`: a daemon with the workers it
    forked, which keep its command line), else `python`; what a local session's fork server forked is named by
    its process name instead (`source-runner`, `planner-daemon`; the server itself `fork-server`).
    Processes that already exited and were not reaped by a live one are not counted, so it is a lower bound."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid in session_pids([session]):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            kind = (
                name
                if name in _FORKED_NAMES
                else _kind(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
            )
            out[kind] = out.get(kind, 0.0) + sum(int(f) for f in fields[11:15]) / tick
    return out


#: The process names of a local session's fork server and its children (`runtime.fork_server`).
_FORKED_NAMES = frozenset({SERVER_NAME, *PROCESS_NAMES.values()})


def _kind(cmdline: list[bytes]) -> str:
    """A process's kind for `session_cpu`, from its argument list."""
    if os.path.basename(cmdline[0].decode(errors="replace")) == "java":
        return "jvm"
    if b"ethereal_kafka.cli" in cmdline:
        return "driver"
    if b"-m" in cmdline[:-1]:  # PySpark's daemons and source runners: named after their module
        return cmdline[cmdline.index(b"-m") + 1].decode(errors="replace").rsplit(".", 1)[-1]
    return "python"


def describe_cpu(cpu: Mapping[str, float]) -> str:
    """`CPU 34.2 s (jvm 22.1, python 8.0, driver 4.1)` for a `session_cpu` result."""
    parts = ", ".join(f"{kind} {seconds:.1f}" for kind, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]))
    return f"CPU {sum(cpu.values()):.1f} s ({parts})"


def _check_deadline(began: float, timeout_s: float, kills: int, log_path: Path) -> None:
    if time.monotonic() - began > timeout_s:
        raise HarnessError(f"crash harness exceeded {timeout_s:.0f}s after {kills} kills (log {log_path})")


def _queries_without_a_commit(root: Path, committed_before: set[tuple[str, int]]) -> set[str]:
    """The queries that have not committed an epoch in this run yet ({"*"} while none of them has): a run's recovery
    is over once every query committed one, so that a kill never keeps a slower query (a stateful one beside a
    stateless one) from ever getting past its first epoch."""
    new = _log_files(root, "commits") - committed_before
    if not new:
        return {"*"}
    return _queries(root) - {query for query, _ in new}


def _queries(root: Path) -> set[str]:
    """The queries under the checkpoint root that have planned an epoch (an offset log)."""
    return {folder.parent.name for folder in root.glob("*/offsets")}


def _log_files(root: Path, log: str) -> set[tuple[str, int]]:
    """`(query, epoch)` of every file in the queries' `commits/` or `offsets/` logs under the checkpoint root."""
    found: set[tuple[str, int]] = set()
    for folder in root.glob(f"*/{log}"):
        with contextlib.suppress(OSError):
            found.update((folder.parent.name, int(p.name)) for p in folder.iterdir() if p.name.isdigit())
    return found


#: Where a kill is aimed, after the run's first commit: anywhere in an epoch, or at a step of a sink task's
#: transaction (just after it began, while it commits, just after it committed).
TARGETS = ("epoch", faults.OPEN, faults.COMMIT, faults.DONE)
#: The delay after a transaction step is seen before the kill (seconds).
STEP_WINDOW_S = (0.0, 0.15)


def _kill_moment(
    proc: subprocess.Popen[bytes],
    root: Path,
    trace: Path,
    committed_before: set[tuple[str, int]],
    rng: random.Random,
    window_s: tuple[float, float],
    epochs_before_kill: tuple[int, int],
    first_commit_timeout_s: float,
) -> tuple[str, dict[str, float]] | None:
    """Wait for the run's first commit, then for more planned epochs, then for the chosen target and a random
    delay; returns the target and the run's CPU (`session_cpu`, read at the start of the delay and taken off it,
    so the kill lands when it was aimed), or None when the process ended first.

    Raises:
        HarnessError: no epoch committed within `first_commit_timeout_s`.
    """
    deadline = time.monotonic() + first_commit_timeout_s
    while waiting := _queries_without_a_commit(root, committed_before):
        if proc.poll() is not None:
            return None
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise HarnessError(
                f"no epoch of {', '.join(sorted(waiting))} committed within {first_commit_timeout_s:.0f}s of a "
                "start (a query whose input ran out commits no more: give it more input)"
            )
        time.sleep(0.02)
    planned = _log_files(root, "offsets")
    more = rng.randint(*epochs_before_kill)
    target = rng.choice(TARGETS)
    while len(_log_files(root, "offsets") - planned) < more:
        if proc.poll() is not None:
            return None
        time.sleep(0.02)
    if target != "epoch":
        # A step of one query's transactions, each query in turn at random: a step of "any query" would nearly
        # always be the fastest query's, and the slower queries' transactions would never see a kill.
        queries = sorted(_queries(root))
        query = rng.choice(queries) if queries else None
        seen = len(_trace_lines(trace))
        while not any(is_step(line, target, query) for line in _trace_lines(trace)[seen:]):
            if proc.poll() is not None:
                return None
            time.sleep(0.01)
        target = f"{target} of {query}" if query is not None else target
    delay = rng.uniform(*(window_s if target == "epoch" else STEP_WINDOW_S))
    sampled = time.monotonic()
    cpu = session_cpu(proc.pid)
    try:
        proc.wait(timeout=max(0.0, delay - (time.monotonic() - sampled)))
        return None
    except subprocess.TimeoutExpired:
        return target, cpu


def trace_step(line: str) -> tuple[str, int, str, str] | None:
    """`(query, epoch, task, step)` of a fault-trace line (`<unix time> <query> <epoch> <task> <step>`), or None."""
    parts = line.split()
    if len(parts) != 5 or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2]), parts[3], parts[4]


def is_step(line: str, step: str, query: str | None) -> bool:
    """Whether a fault-trace line is `step` of `query` (of any query when None)."""
    parsed = trace_step(line)
    return parsed is not None and parsed[3] == step and (query is None or parsed[0] == query)


def _trace_lines(trace: Path) -> list[str]:
    try:
        return trace.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


def describe_kill(root: Path, trace: Path) -> str:
    """Where a kill lands, read at the moment of the kill: per query, the last planned epoch, whether Spark
    committed it, and what its sink tasks' transactions were doing (from the fault trace)."""
    planned = _log_files(root, "offsets")
    committed = _log_files(root, "commits")
    steps: dict[tuple[str, int, str], str] = {}
    with contextlib.suppress(OSError):
        for line in trace.read_text(encoding="utf-8").splitlines():
            parsed = trace_step(line)
            if parsed is not None:
                query, epoch, task, step = parsed
                steps[(query, epoch, task)] = step
    parts = []
    for query in sorted({q for q, _ in planned}):
        epoch = max(e for q, e in planned if q == query)
        if (query, epoch) in committed:
            parts.append(f"{query} between epochs ({epoch} committed)")
            continue
        tasks = Counter(step for (q, e, _), step in steps.items() if q == query and e == epoch)
        state = (
            ", ".join(f"{n} task(s) {_STEP_WORDS[s]}" for s, n in sorted(tasks.items()))
            or "no transaction begun"
        )
        parts.append(f"{query} epoch {epoch} in flight: {state}")
    return "; ".join(parts) or "before any epoch was planned"


_STEP_WORDS = {
    faults.START: "fencing or reading the marker",
    faults.OPEN: "in an open transaction",
    faults.COMMIT: "committing",
    faults.DONE: "committed",
    faults.SKIP: "skipped (committed before)",
}


def _wait_group_gone(pgid: int, timeout_s: float = 30.0) -> None:
    """Wait until no process of the killed group remains (a JVM can take a moment to be reaped)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    """CLI: run the harness on a job whose expected output is a file of `key<TAB>value` lines."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("job")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--expected", type=Path, required=True, help="file of key<TAB>value lines")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True, help="output topic")
    args = parser.parse_args(argv)
    from ethereal_kafka.connectors.kafka.topics import read_committed

    run = run_with_kills(args.job, args.kills, args.seed)
    print("\n".join(run.landed))
    expected = [tuple(line.split("\t", 1)) for line in args.expected.read_text().splitlines() if line]
    got = [
        ((r.key or b"").decode(), (r.value or b"").decode())
        for r in read_committed(args.bootstrap, args.topic)
    ]
    result = compare(expected, got)
    print(result.line(run.kills))
    return 0 if result.duplicates == 0 and result.lost == 0 else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
