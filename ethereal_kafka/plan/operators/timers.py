"""Timer bookkeeping of a process function, per key: which timers the user registered, which the operator needs for
itself, and which Spark timers stand for them.

Spark's transformWithState keeps one set of timers per key in one time domain, fixed per operator: the watermark
(EventTime mode) or the batch timestamp (ProcessingTime mode). A key may need timers of several kinds:

- the user's **event-time** timers (fire when the watermark reaches them);
- the user's **processing-time** timers (fire when the epoch's processing time reaches them; ProcessingTime mode
  only, as an EventTime-mode operator runs no epoch without data);
- the **cleanup** timer of keyed state with TTL (see `keyed_state`): in ProcessingTime mode at the earliest expiry;
  in EventTime mode, where a timer can only wait for the watermark, at `W + (expiry - P)` — re-armed from the
  real expiry each time it fires early, so a key's expired state goes once the watermark has moved by the time
  that was left;
- the **poll** timer, ProcessingTime mode only: event-time timers are emulated there (Spark's TimerValues carry the
  watermark in that mode as well) by calling the key back in the next epoch (`P + 1`) while it has event-time
  timers pending, and firing those the watermark has reached.

`TimerBook` holds all of that for one key (pickled in the operator's `_ek_timers` state) and keeps the Spark timers
registered equal to the set it needs (`sync`). It is pure Python: no Spark needed to test it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

EVENT = "event"
PROCESSING = "processing"


@dataclass
class TimerBook:
    """The timers of one key.

    Attributes:
        key: The key's `__key` value as rows carry it (a timer callback has no row to take it from).
        event: The user's event-time timers (epoch ms).
        processing: The user's processing-time timers (epoch ms).
        cleanup: When the TTL cleanup timer fires, in the operator's time domain; None when not armed.
        cleanup_target: The processing time (expiry) the cleanup timer was armed for.
        poll: ProcessingTime mode: the next-epoch poll for pending event-time timers.
        registered: The Spark timers currently registered for the key.
    """

    key: Any = None
    event: set[int] = field(default_factory=set)
    processing: set[int] = field(default_factory=set)
    cleanup: int | None = None
    cleanup_target: int | None = None
    poll: int | None = None
    registered: set[int] = field(default_factory=set)

    # -- persistence ---------------------------------------------------------------------------------------------
    def pack(self) -> tuple[Any, ...]:
        """A compact picklable form (what the operator stores)."""
        return (
            self.key,
            sorted(self.event),
            sorted(self.processing),
            self.cleanup,
            self.cleanup_target,
            self.poll,
            sorted(self.registered),
        )

    @classmethod
    def unpack(cls, packed: tuple[Any, ...]) -> TimerBook:
        """The book `pack` made."""
        key, event, processing, cleanup, target, poll, registered = packed
        return cls(key, set(event), set(processing), cleanup, target, poll, set(registered))

    def is_empty(self) -> bool:
        """True when the key needs no timer at all (its book can be deleted)."""
        return not (self.event or self.processing or self.cleanup is not None or self.poll is not None)

    # -- user timers ---------------------------------------------------------------------------------------------
    def next_due(self, watermark: int, now: int) -> tuple[str, int] | None:
        """The next user timer to fire: the earliest event-time timer at or before `watermark`, else the earliest
        processing-time timer at or before `now`; None when none is due."""
        event = min((t for t in self.event if t <= watermark), default=None)
        if event is not None:
            return EVENT, event
        processing = min((t for t in self.processing if t <= now), default=None)
        if processing is not None:
            return PROCESSING, processing
        return None

    def pop(self, kind: str, timestamp: int) -> None:
        """Forget a user timer (it fires, or the user deleted it)."""
        (self.event if kind == EVENT else self.processing).discard(timestamp)

    def add(self, kind: str, timestamp: int) -> None:
        """Remember a user timer (one per kind and time, as in Flink)."""
        (self.event if kind == EVENT else self.processing).add(int(timestamp))

    # -- the operator's own timers -------------------------------------------------------------------------------
    def cleanup_due(self, threshold: int) -> bool:
        """True when the cleanup timer is armed at or before `threshold` (the mode's current time)."""
        return self.cleanup is not None and self.cleanup <= threshold

    def disarm_cleanup(self) -> None:
        """The cleanup timer fired (the operator sweeps and re-arms from what remains)."""
        self.cleanup = self.cleanup_target = None

    def arm_cleanup(self, expiry: int, mode: str, watermark: int, now: int) -> None:
        """Make sure the cleanup timer fires no later than state expiring at `expiry` (processing time) needs."""
        if self.cleanup_target is not None and self.cleanup_target <= expiry:
            return
        self.cleanup_target = expiry
        if mode == PROCESSING:
            self.cleanup = expiry
        else:
            self.cleanup = max(watermark, 0) + max(1, expiry - now)

    def plan_poll(self, mode: str, now: int) -> None:
        """ProcessingTime mode: call the key back next epoch while it has event-time timers pending."""
        self.poll = now + 1 if mode == PROCESSING and self.event else None

    # -- Spark timers --------------------------------------------------------------------------------------------
    def needed(self, mode: str) -> set[int]:
        """The Spark timers the key needs in `mode` (user timers of the mode's domain, cleanup, poll)."""
        wanted = set(self.event if mode == EVENT else self.processing)
        wanted.update(t for t in (self.cleanup, self.poll) if t is not None)
        return wanted

    def sync(self, mode: str, register: Callable[[int], None], delete: Callable[[int], None]) -> None:
        """Register and delete Spark timers (`register(ts)`, `delete(ts)`) until they are exactly `needed(mode)`."""
        wanted = self.needed(mode)
        for timestamp in sorted(self.registered - wanted):
            delete(timestamp)
        for timestamp in sorted(wanted - self.registered):
            register(timestamp)
        self.registered = wanted
