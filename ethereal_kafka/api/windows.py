"""Window assigners and triggers (frozen descriptions; the plan layer decides how they run).

Event-time windows are half-open, `[start, end)`, in epoch milliseconds. A window fires when the watermark reaches
its end (see `watermarks`); with `allowed_lateness` it stays alive until the watermark reaches `end + lateness`, and
every record arriving in that time fires it again with the updated result (a *late firing*). Records for windows
past that are *late*: dropped, or sent to `side_output_late_data(tag)`.

Count and global windows are not bound to time: a count window of size n fires (and is purged) after every n
records of a key; a global window holds all records of a key and fires as its trigger says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ethereal_kafka.api.time import ZERO, Duration, as_duration


@dataclass(frozen=True, order=True)
class TimeWindow:
    """An event-time window `[start, end)` in epoch milliseconds."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        """The largest event time inside the window (`end - 1`)."""
        return self.end - 1


class WindowAssigner:
    """Base of window assigners. Subclasses are frozen dataclasses."""

    #: True for event-time windows (`assign` places a record by its timestamp).
    event_time: bool = True

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The windows a record with event time `timestamp` belongs to (before any session merging)."""
        raise NotImplementedError


@dataclass(frozen=True)
class TumblingEventTimeWindows(WindowAssigner):
    """Fixed-size, non-overlapping windows aligned to `offset` (windows start at `offset + k * size`)."""

    size: Duration
    offset: Duration = ZERO

    @classmethod
    def of(cls, size: Duration | int, offset: Duration | int = 0) -> TumblingEventTimeWindows:
        """Windows of `size`, shifted by `offset`."""
        size, off = as_duration(size), as_duration(offset)
        if size.millis <= 0:
            raise ValueError("a tumbling window needs a positive size")
        return cls(size, off)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The one window holding `timestamp`."""
        start = timestamp - (timestamp - self.offset.millis) % self.size.millis
        return [TimeWindow(start, start + self.size.millis)]


@dataclass(frozen=True)
class SlidingEventTimeWindows(WindowAssigner):
    """Windows of `size` starting every `slide` (a record belongs to `size / slide` windows)."""

    size: Duration
    slide: Duration
    offset: Duration = ZERO

    @classmethod
    def of(
        cls, size: Duration | int, slide: Duration | int, offset: Duration | int = 0
    ) -> SlidingEventTimeWindows:
        """Windows of `size` every `slide`, shifted by `offset`."""
        size, slide, off = as_duration(size), as_duration(slide), as_duration(offset)
        if size.millis <= 0 or slide.millis <= 0:
            raise ValueError("a sliding window needs a positive size and slide")
        return cls(size, slide, off)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """Every window holding `timestamp`, earliest first."""
        last = timestamp - (timestamp - self.offset.millis) % self.slide.millis
        out = []
        start = last
        while start > timestamp - self.size.millis:
            out.append(TimeWindow(start, start + self.size.millis))
            start -= self.slide.millis
        return sorted(out)


@dataclass(frozen=True)
class EventTimeSessionWindows(WindowAssigner):
    """Sessions: a record opens `[ts, ts + gap)`; overlapping sessions of a key merge.

    With `max_length`, a session never spans more than `max_length` from its first record: a record at or past
    `start + max_length` opens a new session, sessions whose union would exceed it do not merge, and a session's
    end is capped at `start + max_length`.
    """

    gap: Duration
    max_length: Duration | None = None

    @classmethod
    def with_gap(cls, gap: Duration | int) -> EventTimeSessionWindows:
        """Sessions closed by `gap` of inactivity."""
        gap = as_duration(gap)
        if gap.millis <= 0:
            raise ValueError("a session window needs a positive gap")
        return cls(gap)

    def with_max_length(self, max_length: Duration | int) -> EventTimeSessionWindows:
        """Cap each session's span (see the class docstring)."""
        cap = as_duration(max_length)
        if cap.millis < self.gap.millis:
            raise ValueError("a session's max length must be at least its gap")
        return replace(self, max_length=cap)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The record's own session before merging."""
        end = timestamp + self.gap.millis
        if self.max_length is not None:
            end = min(end, timestamp + self.max_length.millis)
        return [TimeWindow(timestamp, end)]


@dataclass(frozen=True)
class GlobalWindows(WindowAssigner):
    """One window per key holding every record; it fires only when its trigger says (e.g. `CountTrigger`)."""

    event_time = False

    @classmethod
    def create(cls) -> GlobalWindows:
        """The global window assigner."""
        return cls()

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The single global window (`start = end = 0` stands for it)."""
        return [TimeWindow(0, 0)]


@dataclass(frozen=True)
class CountWindows(WindowAssigner):
    """Count windows: a window per `size` records of a key; with `slide`, a window of the last `size` records
    every `slide` records (the first ones fire once `slide` records have arrived, holding fewer than `size`)."""

    size: int
    slide: int | None = None

    event_time = False

    def __post_init__(self) -> None:
        if self.size <= 0 or (self.slide is not None and self.slide <= 0):
            raise ValueError("count windows need a positive size and slide")

    def assign(self, timestamp: int) -> list[TimeWindow]:
        """Count windows are assigned by arrival, not time (see the operator)."""
        return [TimeWindow(0, 0)]


class Trigger:
    """Base of triggers: when a window emits its result."""


@dataclass(frozen=True)
class EventTimeTrigger(Trigger):
    """Fire when the watermark reaches the window's end, then once per late record within the allowed lateness
    (the default of event-time windows)."""

    @classmethod
    def create(cls) -> EventTimeTrigger:
        """The event-time trigger."""
        return cls()


@dataclass(frozen=True)
class CountTrigger(Trigger):
    """Fire every `count` records added to the window (the window keeps accumulating unless purged)."""

    count: int

    @classmethod
    def of(cls, count: int) -> CountTrigger:
        """Fire every `count` records."""
        if count <= 0:
            raise ValueError("a count trigger needs a positive count")
        return cls(count)


@dataclass(frozen=True)
class ContinuousEventTimeTrigger(Trigger):
    """Fire every `interval` of event time (when the watermark passes each multiple of it inside the window), and
    when the window ends."""

    interval: Duration

    @classmethod
    def of(cls, interval: Duration | int) -> ContinuousEventTimeTrigger:
        """Fire every `interval` of event time."""
        every = as_duration(interval)
        if every.millis <= 0:
            raise ValueError("a continuous trigger needs a positive interval")
        return cls(every)


@dataclass(frozen=True)
class PurgingTrigger(Trigger):
    """Fire when `inner` fires, then clear the window's contents."""

    inner: Trigger

    @classmethod
    def of(cls, inner: Trigger) -> PurgingTrigger:
        """Purge after each firing of `inner`."""
        return cls(inner)
