"""Wait for a started job, stop it between epochs on SIGTERM/SIGINT, and report how it ended.

The stop is graceful: the first signal closes the coordinator's epoch gate (no epoch starts writing any more); each
query between epochs is stopped once Spark has finished the trigger of its last epoch (commit log written), and each
query with an epoch in flight is waited for, up to `shutdown.timeout.ms` in all, until that epoch commits or fails,
then stopped the same way. A second signal, or the timeout, forces the stop: the queries are stopped at once
and an epoch still writing is interrupted; its open transactions are aborted when the job next starts (the
coordinator fences the id pool) and Spark replays it, so the output stays exact either way. A third signal exits the
process immediately.

Signal handlers only set flags; the main thread, which polls the queries, does the work.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from ethereal_kafka.eos.errors import EpochRefusedError
from ethereal_kafka.eos.gate import EpochGate, EpochOutcome
from ethereal_kafka.runtime.errors import JobFailedError
from ethereal_kafka.runtime.failure import root_cause

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from ethereal_kafka.runtime.job import RunningJob
    from ethereal_kafka.runtime.summary import RunSummary

log = logging.getLogger(__name__)

#: How often the main thread looks at the queries and the stop flags.
POLL_S = 0.5
#: After the epochs in flight finished, how long Spark may take to close their trigger (write its commit log).
SETTLE_S = 5.0

FINISHED = "finished"
GRACEFUL = "graceful"
FORCED = "forced"


@dataclass(frozen=True)
class StopReport:
    """How a job run ended without failing.

    Attributes:
        how: `finished` (the input was consumed, `--available-now`), `graceful` (stopped between epochs) or
            `forced` (an epoch in flight was interrupted).
        signal: The signal that asked for the stop (None when finished).
        reason: Why a stop was forced (`a second signal`, `shutdown.timeout.ms=...`), else None.
        seconds: From the stop request to the queries' end.
        last: The last finished epoch of each query.
        interrupted: `{query: epoch}` of the epochs a forced stop interrupted.
        refused: `(query, epoch)` of the epochs Spark had planned but the closed gate refused.
        taken_over_by: The instance that took the app over (`run --takeover`), when that ended the run.
        summary: The run's totals (records in and out, dead-lettered, late, epochs, wall time), which `run` prints
            before the stop line; None when the job ran without metrics (`runtime.summary`).
    """

    how: str
    signal: str | None = None
    reason: str | None = None
    seconds: float = 0.0
    last: dict[str, EpochOutcome] = field(default_factory=dict)
    interrupted: dict[str, int] = field(default_factory=dict)
    refused: list[tuple[str, int]] = field(default_factory=list)
    taken_over_by: str | None = None
    summary: RunSummary | None = None

    def line(self) -> str:
        """The one-line summary the runner logs last (tests and operators grep it)."""
        done = ", ".join(
            f"{q} epoch {o.epoch} {'committed' if o.committed else 'interrupted' if o.interrupted else 'failed'}"
            for q, o in sorted(self.last.items())
        )
        done = f"last epochs: {done}" if done else "no epoch ran"
        if self.how == FINISHED:
            return f"stopped: input consumed (available-now); {done}"
        text = f"stopped on {self.signal}: {self.how}"
        if self.how == FORCED:
            text += f" ({self.reason})"
        text += f" in {self.seconds:.1f}s; {done}"
        if self.interrupted:
            epochs = ", ".join(f"{q} epoch {e}" for q, e in sorted(self.interrupted.items()))
            text += f"; interrupted: {epochs} (aborted by fencing and replayed at the next start)"
        if self.refused:
            epochs = ", ".join(f"{q} epoch {e}" for q, e in sorted(set(self.refused)))
            text += f"; not started: {epochs} (replayed at the next start)"
        if self.taken_over_by:
            text += f"; handed over to {self.taken_over_by}"
        return text


class JobLifecycle:
    """Runs the main-thread side of one job run: signals, waiting, stopping, reporting.

    Created (and its signal handlers installed) before the job starts, so a signal during start-up is kept;
    `attach()` hands it the started queries.

    Args:
        shutdown_timeout_s: How long a graceful stop waits for the epochs in flight.
        log_hint: Appended to failure lines (where the full trace is).
        stall_timeout_s: An epoch writing longer than this fails the run (`epoch.stall.timeout.ms`); 0: never.
    """

    def __init__(self, shutdown_timeout_s: float, log_hint: str = "", stall_timeout_s: float = 0.0) -> None:
        self.running: RunningJob | None = None
        self.gate = EpochGate()
        self.shutdown_timeout_s = shutdown_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.log_hint = log_hint
        self._stop = threading.Event()
        self._force = threading.Event()
        self._signals = 0
        self._signal_name: str | None = None
        self._previous: dict[int, Any] = {}
        #: `--available-now`: stop queries that keep running epochs without data once their input is consumed.
        self.stop_when_drained = False
        self._first_epochs: dict[str, int] = {}

    def attach(self, running: RunningJob, gate: EpochGate) -> None:
        """Take the started queries and the coordinator's gate; closes the gate at once if a stop was requested.
        Called again with the new queries when the runner restarts them after a failure."""
        self.running = running
        self.gate = gate
        self._first_epochs = {}
        if self._stop.is_set():
            gate.close()

    def sleep(self, seconds: float) -> bool:
        """Wait `seconds` (a restart's delay); returns True early when a stop is requested meanwhile."""
        return self._stop.wait(seconds)

    # -- signals ---------------------------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """Handle SIGTERM and SIGINT until `restore_signal_handlers()`.

        Call it again once the SparkContext is up: PySpark installs its own SIGINT handler (which cancels every
        job and raises KeyboardInterrupt into py4j calls) when the context starts. Calling again re-asserts this
        lifecycle's handlers and keeps the handlers of the first call for `restore_signal_handlers()`.

        Python only lets the main thread install handlers; from another thread (a job run inside a larger program)
        this does nothing, and `request_stop()` is the way to stop the job.
        """
        if threading.current_thread() is not threading.main_thread():
            log.debug("not the main thread: SIGTERM/SIGINT keep their handlers; use request_stop()")
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.signal(signum, self._on_signal)
            self._previous.setdefault(signum, previous)

    def restore_signal_handlers(self) -> None:
        """Put back the handlers `install_signal_handlers` replaced."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def request_stop(self, name: str = "request") -> None:
        """Ask for a graceful stop (what the first signal does); a second call forces it."""
        self._signals += 1
        if self._signal_name is None:
            self._signal_name = name
        if self._signals == 1:
            self.gate.close()
            self._stop.set()
        else:
            self._force.set()

    @property
    def stop_requested(self) -> bool:
        """True once a stop was asked for."""
        return self._stop.is_set()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._signals >= 2:
            os.write(2, f"ethereal-kafka: third {name}: exiting now\n".encode())
            os._exit(1)
        self.request_stop(name)

    # -- waiting ---------------------------------------------------------------------------------------------------
    def wait(self) -> StopReport:
        """Wait until the queries end by themselves (`--available-now`) or a stop is requested and carried out.

        Raises:
            JobFailedError: a query failed (one line naming the root cause); the other queries' epochs in flight
                were first given `shutdown_timeout_s` to finish, then the queries were stopped.
            RuntimeError: called before `attach()`.
        """
        if self.running is None:
            raise RuntimeError("JobLifecycle.wait() before attach()")
        while True:
            if self._stop.is_set():
                return self._stop_queries()
            try:
                self._raise_failure()
            except JobFailedError:
                self._stop_after_failure()
                raise
            self._raise_stall()
            active = [q for q in self._queries().values() if q.isActive]
            if not active:
                return StopReport(FINISHED, last=self.gate.last())
            if self.stop_when_drained and all(
                self._drained(n, q) for n, q in self._queries().items() if q.isActive
            ):
                return self._stop_drained()
            try:
                active[0].awaitTermination(POLL_S)  # type: ignore[arg-type]  # seconds; floats work
            except Exception:  # the query failed: the next turn reports it (or ignores it when stopping)
                log.debug("query ended with an error", exc_info=True)

    def _drained(self, name: str, query: StreamingQuery) -> bool:
        """True when the query's last epoch read nothing (every source ended where it started) and was not the
        first epoch of this run (which may replay an epoch logged before new input arrived): under
        `--available-now` its input is consumed."""
        try:
            progress = query.lastProgress
        except Exception:  # a query ending under our feet: Spark's own end is reported by the next turn
            return False
        if not progress:
            return False
        epoch = int(progress.get("batchId", -1))
        first = self._first_epochs.setdefault(name, epoch)
        sources = progress.get("sources") or []
        return (
            epoch > first
            and bool(sources)
            and all(s.get("startOffset") == s.get("endOffset") for s in sources)
        )

    def _stop_drained(self) -> StopReport:
        """`--available-now` with queries whose input is consumed but that Spark keeps running (an operator in
        ProcessingTime mode asks for an epoch every trigger, its timers being due on the clock): stop them between
        epochs, as a signal would. Timers due by the last epoch have fired; later ones fire at the next run."""
        log.info("input consumed (available-now): stopping queries that keep running epochs without data")
        self.request_stop("available-now")
        report = self._stop_queries()
        if report.how != GRACEFUL:
            return report
        return dataclasses.replace(report, how=FINISHED, signal=None, refused=[])

    def _stop_after_failure(self) -> None:
        """One query failed: let the other queries' epochs in flight finish (bounded), then stop them."""
        self.gate.close()
        if not self.gate.wait_idle(self.shutdown_timeout_s, interrupted=self._force):
            log.warning("stopping the other queries with epochs in flight: %s", self.gate.in_flight())
        self._interrupt_queries()

    def _interrupt_queries(self) -> None:
        """Stop every active query at once, epochs in flight included (`EpochGate.interrupt` first, so their
        writes are recorded as interrupted, not failed)."""
        self.gate.interrupt()
        for query in self._queries().values():
            if query.isActive:
                query.stop()

    def _raise_stall(self) -> None:
        """Stop every query and fail the run when an epoch has been writing longer than `stall_timeout_s`.

        A task that never returns holds its epoch, and its query, forever: Spark has no timeout for a task, and
        a stuck one keeps no exception to report (a transformWithState state server that died on a stray
        connection leaves its Python task waiting for an answer). The stop interrupts it; the epoch wrote nothing
        a read_committed consumer sees, and its open transactions are aborted when the queries next start.

        Raises:
            JobFailedError: `query NAME epoch N has been writing for S s, longer than epoch.stall.timeout.ms=...`.
        """
        longest = self.gate.longest_in_flight() if self.stall_timeout_s > 0 else None
        if longest is None or longest[2] < self.stall_timeout_s:
            return
        query, epoch, seconds = longest
        line = (
            f"query {query} epoch {epoch} has been writing for {seconds:.0f}s, longer than "
            f"epoch.stall.timeout.ms={int(self.stall_timeout_s * 1000)}: a task is stuck; the queries were stopped "
            f"and the epoch is replayed when they start again{self.log_hint}"
        )
        self._interrupt_queries()
        raise JobFailedError(line)

    def _raise_failure(self, ignore: Callable[[str], bool] = lambda _name: False) -> None:
        for name, query in self._queries().items():
            if query.isActive or ignore(name):
                continue
            error = query.exception()
            if error is None:
                continue
            raise JobFailedError(self.failure_line(name, error)) from error

    def failure_line(self, name: str, error: BaseException) -> str:
        """`query NAME failed at epoch N: <root cause>` (plus the log hint)."""
        outcome = self.gate.last().get(name)
        where = f"query {name} failed"
        cause: BaseException = error
        if (
            outcome is not None
            and outcome.error is not None
            and not isinstance(outcome.error, EpochRefusedError)
        ):
            where += f" at epoch {outcome.epoch}"
            cause = outcome.error
        text = f"{where}: {root_cause(cause)}"
        log.debug("%s\n%s", text, error)
        return f"{text}{self.log_hint}"

    # -- stopping --------------------------------------------------------------------------------------------------
    def _stop_queries(self) -> StopReport:
        began = time.monotonic()
        deadline = began + self.shutdown_timeout_s
        log.info(
            "%s received: stopping between epochs (no new epoch starts; waiting up to %.0fs for %s; a second signal "
            "forces the stop)",
            self._signal_name,
            self.shutdown_timeout_s,
            ", ".join(f"{q} epoch {e}" for q, e in sorted(self.gate.in_flight().items()))
            or "no epoch in flight",
        )
        reason: str | None = None
        interrupted: dict[str, int] = {}
        while True:
            # A query between epochs stops at once (after its last trigger settles), so Spark does not go on
            # planning epochs the closed gate would refuse while another query finishes its epoch in flight.
            flight = self.gate.in_flight()
            idle = {name: q for name, q in self._queries().items() if q.isActive and name not in flight}
            if idle:
                self._settle(idle, min(SETTLE_S, max(0.0, deadline - time.monotonic())))
                for query in idle.values():
                    if query.isActive:
                        query.stop()
            if not any(q.isActive for q in self._queries().values()):
                break
            if self._force.is_set() or time.monotonic() >= deadline:
                interrupted = self.gate.in_flight()
                reason = (
                    "a second signal"
                    if self._force.is_set()
                    else f"shutdown.timeout.ms={int(self.shutdown_timeout_s * 1000)} passed"
                )
                log.warning(
                    "forcing the stop (%s): interrupting %s; its open transactions are aborted when the job next "
                    "starts",
                    reason,
                    ", ".join(f"{q} epoch {e}" for q, e in sorted(interrupted.items())) or "no epoch",
                )
                self._interrupt_queries()
                break
            self.gate.wait_idle(min(0.2, max(0.0, deadline - time.monotonic())), interrupted=self._force)
        interrupted = {q: e for q, e in interrupted.items() if self._was_interrupted(q, e)}
        refused = self.gate.refused()
        refused_queries = {q for q, _ in refused}
        forced = bool(reason)
        self._raise_failure(ignore=lambda name: forced or name in refused_queries)
        return StopReport(
            FORCED if forced else GRACEFUL,
            signal=self._signal_name,
            reason=reason,
            seconds=time.monotonic() - began,
            last=self.gate.last(),
            interrupted=interrupted,
            refused=refused,
        )

    def _settle(self, queries: dict[str, StreamingQuery], timeout_s: float) -> None:
        """Give each of `queries` (none with an epoch in flight) up to `timeout_s` to finish the trigger that wrote
        its last epoch: Spark writes its commit log after the write returns and reports the epoch's progress right
        after, so a stop issued once the progress shows the epoch interrupts no file write. The next trigger may
        start at once when the job is behind; the stop then lands in its planning (an interruption Spark handles as
        a stop) or, rarely, the closed gate refuses its epoch."""
        deadline = time.monotonic() + timeout_s
        targets = {name: outcome.epoch for name, outcome in self.gate.last().items()}
        pending = dict(queries)
        while pending and time.monotonic() < deadline and not self._force.is_set():
            pending = {
                name: q for name, q in pending.items() if q.isActive and not _settled(q, targets.get(name))
            }
            if pending:
                time.sleep(0.02)

    def _queries(self) -> dict[str, StreamingQuery]:
        return dict(self.running.queries) if self.running is not None else {}

    def _was_interrupted(self, query: str, epoch: int) -> bool:
        outcome = self.gate.last().get(query)
        return outcome is None or outcome.epoch != epoch or not outcome.committed


def _settled(query: StreamingQuery, epoch: int | None) -> bool:
    """True when Spark finished the trigger of `epoch` (its progress is reported), or is between triggers."""
    try:
        if epoch is not None:
            progress = query.lastProgress
            return progress is not None and int(progress.get("batchId", -1)) >= epoch
        return not bool(query.status.get("isTriggerActive", False))
    except Exception:  # a query ending under our feet: nothing left to wait for
        return True
