"""The console progress line of `ethereal-kafka run`: throughput, lag and the last epoch, readable at a glance.

    orders-enricher | in 1,020 rec/s | out 1,000 rec/s | lag 0 | epoch 57 in 312 ms | 3 dead-lettered

On a terminal (`progress=tty`, or `auto` when stderr is one) the line is rewritten in place every second, with
rates over the last 10 s. Otherwise (`log`: a file, a pipe, a service's journal) the line is made every
`progress.interval.ms`, with rates over that interval, and printed only when it says something new: when it differs
from the last line printed, or as a heartbeat when the same line has not been printed for `HEARTBEAT_S` (an idle
job writes one line a minute, not one every interval forever). A rate below 1 rec/s that is not zero reads `<1 rec/s`
(`0 rec/s` means nothing came). Everything goes to stderr; `progress=off` prints nothing.

While an in-place line is live, anything else written to the terminal must go through `above_live_line()` (the
run's console log handler does, `runtime.logs`): the line is erased first and redrawn after, so no other line is
glued onto it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ethereal_kafka.config.job import JobConfig


@dataclass(frozen=True)
class Snapshot:
    """Job-wide totals at one moment (for the progress line).

    Attributes:
        at: `time.monotonic()` when taken.
        lag: Sum of every partition's lag, or None before Spark reported any.
        last_epoch: The highest epoch committed by any query (None before the first).
        last_epoch_ms: How long that epoch took.
    """

    at: float
    records_in: int
    records_out: int
    dead_lettered: int
    lag: int | None
    last_epoch: int | None
    last_epoch_ms: int | None
    failed_epochs: int


#: Refresh period and rate window of the in-place (terminal) line.
TTY_REFRESH_S = 1.0
TTY_WINDOW_S = 10.0

#: In log mode, the longest a job goes without a progress line when nothing changes (an idle job's heartbeat).
HEARTBEAT_S = 60.0

#: Held while anything is written to a terminal showing a live line; `_live` is that line (one per process).
_TERMINAL = threading.RLock()
_live: ProgressLine | None = None


@contextlib.contextmanager
def above_live_line() -> Iterator[None]:
    """Let the caller write whole lines to the terminal: the live progress line, if any, is erased before and
    redrawn after. Without a live line this only serializes the writers."""
    with _TERMINAL:
        line = _live
        if line is not None:
            line.erase()
        try:
            yield
        finally:
            if line is not None:
                line.redraw()


def render(app_id: str, now: Snapshot, before: Snapshot | None) -> str:
    """One progress line from two snapshots (rates are over the time between them; none without `before`)."""
    seconds = now.at - before.at if before is not None else 0.0

    def rate(current: int, previous: int | None) -> str:
        if previous is None or seconds <= 0:
            return f"{current:,} total"
        per_s = (current - previous) / seconds
        # A trickle would round to "0 rec/s", which must mean that nothing came (and, log mode printing on change,
        # would hide the records' arrival); below 1 rec/s the line says `<1`, one stable text for any trickle.
        return "<1 rec/s" if 0 < per_s < 1 else f"{per_s:,.0f} rec/s"

    parts = [
        app_id,
        f"in {rate(now.records_in, before.records_in if before else None)}",
        f"out {rate(now.records_out, before.records_out if before else None)}",
        f"lag {now.lag:,}" if now.lag is not None else "lag ?",
        (
            f"epoch {now.last_epoch} in {now.last_epoch_ms:,} ms"
            if now.last_epoch is not None and now.last_epoch_ms is not None
            else "no epoch committed yet"
        ),
    ]
    if now.dead_lettered:
        parts.append(f"{now.dead_lettered:,} dead-lettered")
    if now.failed_epochs:
        parts.append(f"{now.failed_epochs:,} failed epochs")
    return " | ".join(parts)


class ProgressLine:
    """Prints the progress line from a daemon thread until `stop()` (see the module docstring)."""

    def __init__(
        self,
        app_id: str,
        snapshot: Callable[[], Snapshot],
        stream: TextIO,
        in_place: bool,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app_id = app_id
        self._snapshot = snapshot
        self._stream = stream
        self.in_place = in_place
        self.interval_s = TTY_REFRESH_S if in_place else interval_s
        self._window_s = TTY_WINDOW_S if in_place else interval_s
        self._history: deque[Snapshot] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False
        self._text = ""
        self._clock = clock
        self._printed: tuple[str, float] | None = None  # log mode: the last line printed, and when

    @classmethod
    def for_job(
        cls, job: JobConfig, snapshot: Callable[[], Snapshot], stream: TextIO | None = None
    ) -> ProgressLine | None:
        """The progress line `job` asks for (`progress`, `progress.interval.ms`), or None for `progress=off`."""
        if job.progress == "off":
            return None
        out = stream if stream is not None else sys.stderr
        in_place = job.progress == "tty" or (job.progress == "auto" and out.isatty())
        return cls(job.app_id, snapshot, out, in_place, job.progress_interval_ms / 1000)

    def line(self) -> str:
        """Take a snapshot and render the line (rates over the configured window)."""
        now = self._snapshot()
        self._history.append(now)
        # Keep the newest snapshot at least one window old as the rates' starting point.
        while len(self._history) > 2 and now.at - self._history[1].at >= self._window_s:
            self._history.popleft()
        before = self._history[0] if self._history[0] is not now else None
        return render(self.app_id, now, before)

    def due(self, text: str) -> bool:
        """Log mode: whether `text` is to be printed now (it differs from the last line printed, or that line is
        `HEARTBEAT_S` old); a True answer counts as printed. Called once per interval by the printing thread."""
        now = self._clock()
        if self._printed is not None:
            last, at = self._printed
            if text == last and now - at < HEARTBEAT_S:
                return False
        self._printed = (text, now)
        return True

    def start(self) -> None:
        """Start printing (the first line after one interval); an in-place line becomes the process's live line."""
        global _live
        self._line_or_none()  # the first snapshot: rates need a starting point
        if self.in_place:
            with _TERMINAL:
                _live = self
        self._thread = threading.Thread(target=self._run, name="ethereal-kafka-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop printing; an in-place line is ended with a newline."""
        global _live
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with _TERMINAL:
            if _live is self:
                _live = None
            if self.in_place and self._drawn:
                self._write("\n")
                self._drawn = False

    def erase(self) -> None:
        """Clear the drawn in-place line (the cursor is left at the start of the empty line)."""
        with _TERMINAL:
            if self._drawn:
                self._write("\r\x1b[K")

    def redraw(self) -> None:
        """Draw the last in-place line again (after `erase` and the lines written in between)."""
        with _TERMINAL:
            if self._drawn and not self._stop.is_set():
                self._write(f"\r{self._text}\x1b[K")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def tick(self) -> None:
        """Make the line once and show it: redrawn in place, or (log mode) printed when `due`. Called every
        interval by the printing thread."""
        text = self._line_or_none()
        if text is not None:
            with _TERMINAL:
                if self.in_place:
                    self._text = text
                    self._write(f"\r{text}\x1b[K")
                    self._drawn = True
                elif self.due(text):
                    self._write(f"{text}\n")

    def _line_or_none(self) -> str | None:
        try:
            return self.line()
        except Exception:  # a progress line must never take the job down
            return None

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # stderr closed or gone: stop quietly
            self._stop.set()
