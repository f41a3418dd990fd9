"""The crash harness: run a job as a separate process, SIGKILL it at random moments, restart it, until it has
consumed its input; then compare what a read_committed consumer sees with the expected output.

    python -m ethereal_kafka.testing.crash JOB.properties --kills 10 --seed 7

The kill takes the whole process group (driver, Spark JVM, Python workers), as a machine crash would. The last line
printed is `records=N duplicates=D lost=L kills=K`.
"""

from __future__ import annotations

import argparse
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

from ethereal_kafka.errors import EtherealKafkaError


class HarnessError(EtherealKafkaError):
    """A job run failed for a reason other than the harness's kill (exit code, timeout)."""


@dataclass(frozen=True)
class CrashRun:
    """What the harness did."""

    kills: int
    runs: int
    seconds: float
    log: Path


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
    window_s: tuple[float, float] = (3.0, 15.0),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 900.0,
    log: Path | None = None,
) -> CrashRun:
    """Run `ethereal-kafka run JOB --available-now` until it exits 0, SIGKILLing the first `kills` runs after a
    random delay in `window_s` (a run that finishes before its kill counts no kill, and the next run is killed).

    Once a run has finished by itself the input is consumed and every later run only starts, recovers and stops:
    the delays are then drawn from 30-90 % of that run's duration, so the remaining kills land inside such runs
    instead of the harness waiting for a kill that a short run never reaches.

    Raises:
        HarnessError: a run exited non-zero by itself, or the whole harness exceeded `timeout_s`.
    """
    rng = random.Random(seed)
    log_path = log or Path(f"/tmp/ethereal-crash-{os.getpid()}.log")
    began = time.monotonic()
    done_kills = runs = 0
    cmd = [sys.executable, "-m", "ethereal_kafka.cli", "run", str(job), "--available-now"]
    with log_path.open("ab") as out:
        while True:
            if time.monotonic() - began > timeout_s:
                raise HarnessError(
                    f"crash harness exceeded {timeout_s:.0f}s after {done_kills} kills (log {log_path})"
                )
            runs += 1
            out.write(f"\n=== run {runs} (kills so far {done_kills}) ===\n".encode())
            out.flush()
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
            started = time.monotonic()
            if done_kills < kills:
                delay = rng.uniform(*window_s)
                try:
                    code = proc.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    _wait_group_gone(proc.pid)
                    done_kills += 1
                    continue
            else:
                try:
                    code = proc.wait(timeout=max(60.0, timeout_s - (time.monotonic() - began)))
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise HarnessError(f"final run did not finish (log {log_path})") from None
            _wait_group_gone(proc.pid)
            if code != 0:
                raise HarnessError(f"run {runs} exited with {code} (log {log_path})")
            lasted = time.monotonic() - started
            if lasted < window_s[1]:
                window_s = (0.3 * lasted, 0.9 * lasted)
            if done_kills >= kills:
                return CrashRun(done_kills, runs, time.monotonic() - began, log_path)


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
    from ethereal_kafka.testing.kafka_io import read_committed

    run = run_with_kills(args.job, args.kills, args.seed)
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
