"""The epoch gate: lets a job stop between epochs instead of in the middle of one.

Every `EpochWriter` passes each epoch through the job's gate. The runner closes the gate when it is told to stop
(SIGTERM/SIGINT); from then on no new epoch starts writing, and the runner waits (bounded) until the epochs in flight
have committed or failed before it stops the queries. An epoch refused by a closed gate has written nothing: Spark
logged its offsets but not its commit, so the next start replays it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ethereal_kafka.eos.errors import EpochRefusedError


@dataclass(frozen=True)
class EpochOutcome:
    """The last epoch a query finished through the gate.

    Attributes:
        query: The query's name.
        epoch: Spark's batch id.
        error: What the write raised (None when it committed): the runner reports its root cause when the query
            then fails.
        interrupted: The write raised after the runner began stopping the queries (`EpochGate.interrupt`): a
            stop ended it, it did not fail.
    """

    query: str
    epoch: int
    error: BaseException | None = field(default=None, compare=False)
    interrupted: bool = field(default=False, compare=False)

    @property
    def committed(self) -> bool:
        """True when the write returned, i.e. the epoch committed."""
        return self.error is None


class EpochGate:
    """Counts the epochs in flight and refuses new ones once closed. Thread-safe.

    Spark calls `foreachBatch` functions on its query threads (through the py4j callback server) while the runner's
    main thread waits; the gate is shared by all writers of one job run.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._closed = False
        self._in_flight: dict[str, tuple[int, float]] = {}  # query: (epoch, when its write began)
        self._last: dict[str, EpochOutcome] = {}
        self._refused: list[tuple[str, int]] = []
        self._held = False
        self._interrupting = False

    @contextmanager
    def epoch(self, query: str, epoch: int) -> Iterator[None]:
        """Hold the gate open while epoch `epoch` of `query` writes.

        Called by `EpochWriter.__call__` around the whole write (phase one and two and the history record).

        Raises:
            EpochRefusedError: the gate is closed; the caller must not write anything.
        """
        with self._cond:
            while self._held and not self._closed:
                self._cond.wait()
            if self._closed:
                self._refused.append((query, epoch))
                raise EpochRefusedError(
                    f"epoch {epoch} of query {query} not started: the job is stopping (it is replayed on restart)"
                )
            self._in_flight[query] = (epoch, time.monotonic())
        error: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            with self._cond:
                self._in_flight.pop(query, None)
                stopped = error is not None and self._interrupting
                self._last[query] = EpochOutcome(query, epoch, error, stopped)
                self._cond.notify_all()

    @contextmanager
    def between_epochs(self, timeout_s: float) -> Iterator[bool]:
        """Keep new epochs from starting to write while the caller works between epochs.

        Called by the autoscaler around releasing executors, so no sink task runs on an executor it removes.
        Waits up to `timeout_s` for the epochs in flight to finish; yields True once none is (epochs that come
        meanwhile wait, and go on when the block ends), or False when they did not finish in time (then nothing is
        held and the caller should try later).
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._held or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.2))
            idle = not self._held and not self._in_flight
            if idle:
                self._held = True
        try:
            yield idle
        finally:
            if idle:
                with self._cond:
                    self._held = False
                    self._cond.notify_all()

    def close(self) -> None:
        """Refuse every epoch that has not started yet (idempotent). Called by the runner when a stop is requested."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        with self._cond:
            return self._closed

    def interrupt(self) -> None:
        """Say that the runner is about to stop queries whose epochs may still be writing (a forced stop, or the
        other queries' stop after one failed); closes the gate. Called before `StreamingQuery.stop()`, so a write
        that then raises is known to have been interrupted by the stop (`interrupting`), not to have failed."""
        with self._cond:
            self._closed = True
            self._interrupting = True
            self._cond.notify_all()

    @property
    def interrupting(self) -> bool:
        """True once `interrupt()` was called: an epoch write that raises from then on was ended by the stop
        (`EpochWriter` records it as "interrupted", not "failed")."""
        with self._cond:
            return self._interrupting

    def in_flight(self) -> dict[str, int]:
        """`{query: epoch}` of the epochs writing now."""
        with self._cond:
            return {query: epoch for query, (epoch, _) in self._in_flight.items()}

    def longest_in_flight(self) -> tuple[str, int, float] | None:
        """`(query, epoch, seconds)` of the epoch that has been writing the longest, or None when none is."""
        with self._cond:
            if not self._in_flight:
                return None
            query, (epoch, began) = min(self._in_flight.items(), key=lambda item: item[1][1])
            return query, epoch, time.monotonic() - began

    def last(self) -> dict[str, EpochOutcome]:
        """The last finished epoch of each query."""
        with self._cond:
            return dict(self._last)

    def refused(self) -> list[tuple[str, int]]:
        """`(query, epoch)` of every epoch the closed gate refused."""
        with self._cond:
            return list(self._refused)

    def wait_idle(self, timeout_s: float, interrupted: threading.Event | None = None) -> bool:
        """Wait until no epoch is in flight.

        Returns:
            True when idle; False when `timeout_s` passed or `interrupted` was set first.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0 or (interrupted is not None and interrupted.is_set()):
                    return False
                self._cond.wait(min(left, 0.2))
            return True

    def pause(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking early when the gate closes (the writer's pause between epochs)."""
        deadline = time.monotonic() + seconds
        with self._cond:
            while not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)
