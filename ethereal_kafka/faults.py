"""Fault injection and tracing hooks for failure tests, read from environment variables; inert unless one is set.

- `ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS`: a sink task sleeps this long inside its first transaction of an epoch, before
  committing it, so that kills and broker restarts land inside open transactions.
- `ETHEREAL_KAFKA_FAULT_TRACE`: a file to which every sink task appends one line per step of its transaction
  (`<unix time> <query> <epoch> <task> <step>`, steps `start`, `open`, `commit`, `done`, `skip`), so a kill harness can say
  where each kill landed. Lines are appended with one `write` each (O_APPEND), so concurrent tasks do not mix.

- `ETHEREAL_KAFKA_FAULT_FAIL_BEFORE_COMMIT`: `1` makes the first attempt of every sink task fail after it produced
  its records, before it commits them (Spark retries the task on a cluster; local masters do not retry).
- `ETHEREAL_KAFKA_FAULT_FAIL_AFTER_COMMIT`: `phase_one` or `phase_two` (comma-separated for both) makes every sink
  task's first transaction of an epoch (phase one) or every phase-two commit's first try (phase two) report a
  failure although its commit landed: `commit_transaction` returned, then `_TIMED_OUT` is raised (what a timeout
  while the coordinator applied the commit looks like to the client).

- `ETHEREAL_KAFKA_FAULT_SAVEPOINT_TRACE` and `ETHEREAL_KAFKA_FAULT_SAVEPOINT_PAUSE_AT`: taking a savepoint appends
  each step to the trace file (`<unix time> <step>`: `scratch`, `table <uid>`, `files`, `manifest`, `sealed`) and
  pauses (10 minutes) after the step named, so a kill harness can land a SIGKILL right after it.

All are read where the step happens (on executors), never at import time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

TXN_DELAY_ENV = "ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS"
TRACE_ENV = "ETHEREAL_KAFKA_FAULT_TRACE"
FAIL_BEFORE_COMMIT_ENV = "ETHEREAL_KAFKA_FAULT_FAIL_BEFORE_COMMIT"
FAIL_AFTER_COMMIT_ENV = "ETHEREAL_KAFKA_FAULT_FAIL_AFTER_COMMIT"
SAVEPOINT_TRACE_ENV = "ETHEREAL_KAFKA_FAULT_SAVEPOINT_TRACE"
SAVEPOINT_PAUSE_ENV = "ETHEREAL_KAFKA_FAULT_SAVEPOINT_PAUSE_AT"


class InjectedFailure(RuntimeError):
    """The failure `ETHEREAL_KAFKA_FAULT_FAIL_BEFORE_COMMIT` injects (a test fault, never raised otherwise)."""


#: The steps a sink task traces, in the order they happen.
START, OPEN, COMMIT, DONE, SKIP = "start", "open", "commit", "done", "skip"


def txn_delay_s() -> float:
    """How long a task holds its first transaction open before committing (0 unless the fault is set)."""
    return int(os.environ.get(TXN_DELAY_ENV, "0") or 0) / 1000


def fail_before_commit(task: int) -> None:
    """Raise `InjectedFailure` in a sink task's first attempt when the fault is set (after it produced)."""
    if os.environ.get(FAIL_BEFORE_COMMIT_ENV) != "1":
        return
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None and context.attemptNumber() == 0:
        raise InjectedFailure(f"injected failure after produce, before commit (task {task}, attempt 0)")


def after_commit(phase: str) -> None:
    """Report a landed commit as failed when `ETHEREAL_KAFKA_FAULT_FAIL_AFTER_COMMIT` names `phase` (`phase_one`
    or `phase_two`). Called right after `commit_transaction` returned, by a sink task's first transaction of an
    epoch and by a phase-two commit's first try.

    Raises:
        KafkaException: `_TIMED_OUT`, as if the commit had not answered in time.
    """
    phases = {p.strip() for p in os.environ.get(FAIL_AFTER_COMMIT_ENV, "").split(",") if p.strip()}
    if phase not in phases:
        return
    from confluent_kafka import KafkaError, KafkaException

    raise KafkaException(
        KafkaError(KafkaError._TIMED_OUT, f"injected: {phase} commit reported failed after it landed")
    )


def trace(query: str, epoch: int, task: int, step: str) -> None:
    """Append one step of a sink task to the trace file, when `ETHEREAL_KAFKA_FAULT_TRACE` names one."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    line = f"{time.time():.3f} {query} {epoch} {task} {step}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


#: In-process hooks for failure tests that drive sink tasks directly (no Spark): `{point: callable(task index)}`.
#: Points: `after_marker` (the marker was read and did not cover the epoch) and `in_transaction` (the transaction is
#: open and its records sent; the marker is not sent yet), both in a task's first attempt at a transaction. Empty in
#: production: `hook()` then does nothing.
HOOKS: dict[str, Callable[[int], None]] = {}


def hook(point: str, task: int) -> None:
    """Call the test hook registered for `point`, if any."""
    registered = HOOKS.get(point)
    if registered is not None:
        registered(task)


def savepoint_step(step: str) -> None:
    """A savepoint finished `step`: traced, and paused when the fault names it (else nothing)."""
    trace = os.environ.get(SAVEPOINT_TRACE_ENV)
    if trace:
        fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{time.time():.3f} {step}\n".encode())
        finally:
            os.close(fd)
    if os.environ.get(SAVEPOINT_PAUSE_ENV) == step:
        time.sleep(600)
