"""Fault injection and tracing hooks for failure tests, read from environment variables; inert unless one is set.

- `ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS`: a sink task sleeps this long inside its first transaction of an epoch, before
  committing it, so that kills and broker restarts land inside open transactions.
- `ETHEREAL_KAFKA_FAULT_TRACE`: a file to which every sink task appends one line per step of its transaction
  (`<unix time> <query> <epoch> <task> <step>`, steps `start`, `open`, `commit`, `done`, `skip`), so a kill harness can say
  where each kill landed. Lines are appended with one `write` each (O_APPEND), so concurrent tasks do not mix.

Both are read where the step happens (on executors), never at import time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

TXN_DELAY_ENV = "ETHEREAL_KAFKA_FAULT_TXN_DELAY_MS"
TRACE_ENV = "ETHEREAL_KAFKA_FAULT_TRACE"

#: The steps a sink task traces, in the order they happen.
START, OPEN, COMMIT, DONE, SKIP = "start", "open", "commit", "done", "skip"


def txn_delay_s() -> float:
    """How long a task holds its first transaction open before committing (0 unless the fault is set)."""
    return int(os.environ.get(TXN_DELAY_ENV, "0") or 0) / 1000


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
