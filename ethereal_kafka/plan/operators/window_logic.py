"""The framework window operator's logic for one key, in plain Python (no Spark): assignment, session merging,
triggers, lateness and purging. `plan.operators.window` runs it inside Spark's transformWithState.

Semantics ("watermark first", see docs/operators-windows.md):

- At the start of an epoch with watermark `W`, `KeyWindows.advance(W)` fires every due window (event-time end
  reached, continuous-trigger point passed) that has not fired for it yet, then drops the windows whose end plus
  the allowed lateness is at or before `W`.
- Then the epoch's elements are added one by one (`KeyWindows.add`) in `element_order`. An element is *late* when
  every window it belongs to (for sessions: the session it would make after merging) ends at or before
  `W - lateness`; it is left out and reported. An element added to a window whose end is at or before `W` fires
  that window again at once (a late firing, one per element) under event-time and continuous triggers.
- Firing is idempotent: a window remembers that its end firing happened (`Pane.fired`) and its next continuous
  point, so calling `advance(W)` again (Spark's timers fire after the epoch's rows) emits nothing new.

Count and global windows have one pane per key (`GLOBAL`): a count trigger fires after every n added elements, a
continuous trigger when the watermark passes a multiple of its interval; sliding count windows keep only the last
`evict` elements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.windows import (
    ContinuousEventTimeTrigger,
    CountTrigger,
    CountWindows,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindows,
    PurgingTrigger,
    SlidingEventTimeWindows,
    Trigger,
    TumblingEventTimeWindows,
    WindowAssigner,
)

#: The pane key of count and global windows (one pane per key).
GLOBAL = (0, 0)

#: Trigger kinds.
EVENT, COUNT, CONTINUOUS = "event", "count", "continuous"


@dataclass(frozen=True)
class TriggerSpec:
    """A trigger reduced to what the operator needs.

    Attributes:
        kind: `event` (fire at the window's end, and per late element), `count` (every `count` elements),
            `continuous` (every `interval` ms of event time, at the end, and per late element).
        purge: Clear the window's contents after each firing (`PurgingTrigger`).
    """

    kind: str
    purge: bool = False
    count: int = 0
    interval: int = 0

    @classmethod
    def of(cls, trigger: Trigger | None, where: str) -> TriggerSpec:
        """The spec of an API trigger (None: the event-time trigger).

        Raises:
            GraphError: an unknown trigger.
        """
        purge = False
        while isinstance(trigger, PurgingTrigger):
            purge, trigger = True, trigger.inner
        if trigger is None or isinstance(trigger, EventTimeTrigger):
            return cls(EVENT, purge)
        if isinstance(trigger, CountTrigger):
            return cls(COUNT, purge, count=trigger.count)
        if isinstance(trigger, ContinuousEventTimeTrigger):
            return cls(CONTINUOUS, purge, interval=trigger.interval.millis)
        raise GraphError(f"{where}: trigger {type(trigger).__name__} is not supported")


@dataclass(frozen=True)
class WindowSpec:
    """What the logic needs to know about a window operator (frozen, picklable).

    Attributes:
        assigner: The API assigner.
        trigger: The normalized trigger.
        lateness: Allowed lateness in ms (time windows only).
        evict: Keep only the last `evict` elements of a pane (sliding count windows), else None.
    """

    assigner: WindowAssigner
    trigger: TriggerSpec
    lateness: int = 0
    evict: int | None = None

    @property
    def timed(self) -> bool:
        """True for windows with an end in event time (tumbling, sliding, session)."""
        return isinstance(
            self.assigner, TumblingEventTimeWindows | SlidingEventTimeWindows | EventTimeSessionWindows
        )

    @property
    def sessions(self) -> bool:
        """True for merging (session) windows."""
        return isinstance(self.assigner, EventTimeSessionWindows)

    @property
    def needs_event_time(self) -> bool:
        """True when the operator needs the watermark (time windows, event-time triggers)."""
        return self.timed or self.trigger.kind in (EVENT, CONTINUOUS)

    @classmethod
    def build(
        cls, assigner: WindowAssigner, trigger: Trigger | None, lateness: int, late_output: bool, where: str
    ) -> WindowSpec:
        """Validate and normalize a window node's settings.

        Raises:
            GraphError: a combination that has no meaning (lateness on a window without an end, a global window
                with an event-time trigger, ...).
        """
        if isinstance(assigner, CountWindows) and trigger is None:
            trigger = CountTrigger(assigner.slide or assigner.size)
            if assigner.slide is None:
                trigger = PurgingTrigger(trigger)
        spec = TriggerSpec.of(trigger, where)
        timed = isinstance(
            assigner, TumblingEventTimeWindows | SlidingEventTimeWindows | EventTimeSessionWindows
        )
        if not timed and not isinstance(assigner, GlobalWindows | CountWindows):
            raise GraphError(f"{where}: window assigner {type(assigner).__name__} is not supported")
        if not timed and (lateness or late_output):
            raise GraphError(
                f"{where}: count and global windows never end, so allowed_lateness and side_output_late_data do "
                "not apply to them"
            )
        if not timed and spec.kind == EVENT:
            raise GraphError(
                f"{where}: a {type(assigner).__name__} window has no end for an event-time trigger to fire at; "
                "use CountTrigger or ContinuousEventTimeTrigger"
            )
        evict = assigner.size if isinstance(assigner, CountWindows) and assigner.slide is not None else None
        return cls(assigner, spec, lateness, evict)


@dataclass
class Pane:
    """One window of one key.

    Attributes:
        start, end: The window `[start, end)` in ms (`GLOBAL` for count/global windows).
        contents: The function's contents (accumulator, reduced element or element list; see `Contents`).
        size: Elements in `contents` (since the last purge).
        pending: Elements counted towards a count trigger since it last fired.
        fired: The end firing happened (time windows).
        next_fire: The next continuous-trigger point (ms), or None.
        last: The largest event time added (session max length; `__ts` of count/global windows).
    """

    start: int
    end: int
    contents: Any
    size: int = 0
    pending: int = 0
    fired: bool = False
    next_fire: int | None = None
    last: int = -(2**62)

    @property
    def window(self) -> tuple[int, int]:
        """The pane's key: `(start, end)`."""
        return (self.start, self.end)


class Contents(Protocol):
    """How a window function keeps a pane's contents (see `window_functions`)."""

    def empty(self) -> Any:
        """Fresh contents."""

    def add(self, contents: Any, element: dict[str, Any], order: tuple[int, int, int]) -> Any:
        """`contents` with `element` added (may mutate and return it); `order` is its (event time, source
        partition, offset), for functions that hand elements over in event-time order."""

    def merge(self, a: Any, b: Any) -> Any:
        """The contents of two merged session windows (`a` starts first)."""


#: Called when a pane fires: `(pane, late_firing)`; reads `pane.contents` before any purge.
FireCallback = Callable[[Pane, bool], None]


@dataclass
class KeyWindows:
    """The panes of one key and the operations on them (see the module docstring).

    Attributes:
        spec: The operator's settings.
        contents: The function's contents handling.
        fire: Called for every firing, in order.
        panes: The live panes by `(start, end)`; `changed`/`removed` record what to write back to state.
    """

    spec: WindowSpec
    contents: Contents
    fire: FireCallback
    panes: dict[tuple[int, int], Pane] = field(default_factory=dict)
    changed: set[tuple[int, int]] = field(default_factory=set)
    removed: set[tuple[int, int]] = field(default_factory=set)

    # -- time ------------------------------------------------------------------------------------------------------
    def advance(self, watermark: int) -> None:
        """Apply watermark `W`: fire what is due and not fired yet, then drop windows past their lateness."""
        trigger = self.spec.trigger
        for key in sorted(self.panes):
            pane = self.panes[key]
            if not self.spec.timed:
                if trigger.kind == CONTINUOUS and pane.next_fire is not None and pane.next_fire <= watermark:
                    pane.next_fire = _next_multiple(watermark, trigger.interval)
                    self._fire(pane, False)
                continue
            if trigger.kind in (EVENT, CONTINUOUS) and not pane.fired and pane.end <= watermark:
                pane.fired = True
                pane.next_fire = None
                self._fire(pane, False)
            elif (
                trigger.kind == CONTINUOUS
                and pane.next_fire is not None
                and pane.next_fire <= watermark
                and pane.next_fire < pane.end
            ):
                pane.next_fire = _next_multiple(watermark, trigger.interval)
                self._fire(pane, False)
            if pane.end + self.spec.lateness <= watermark:
                self._drop(key)

    def timers(self, watermark: int) -> set[int]:
        """Event times (> `W`) at which this key needs a timer: window ends, continuous points, cleanups."""
        wanted: set[int] = set()
        trigger = self.spec.trigger
        for pane in self.panes.values():
            if self.spec.timed:
                wanted.add(pane.end + self.spec.lateness)
                if trigger.kind in (EVENT, CONTINUOUS) and not pane.fired:
                    wanted.add(pane.end)
            point = pane.next_fire if trigger.kind == CONTINUOUS else None
            if point is not None and (not self.spec.timed or point < pane.end):
                wanted.add(point)
        return {t for t in wanted if t > watermark}

    # -- elements --------------------------------------------------------------------------------------------------
    def add(self, element: dict[str, Any], order: tuple[int, int, int], watermark: int) -> bool:
        """Add one element under watermark `W`; `order` is its (event time, source partition, offset). Returns
        False when the element is late (not added)."""
        ts = order[0]
        if not self.spec.timed:
            pane = self.panes.get(GLOBAL)
            if pane is None:
                pane = self._new_pane(GLOBAL[0], GLOBAL[1], ts)
            self._insert(pane, element, order, watermark)
            return True
        if self.spec.sessions:
            return self._add_to_session(element, order, watermark)
        live = [w for w in self.spec.assigner.assign(ts) if w.end + self.spec.lateness > watermark]
        for window in live:
            pane = self.panes.get((window.start, window.end))
            if pane is None:
                pane = self._new_pane(window.start, window.end, ts)
            self._insert(pane, element, order, watermark)
        return bool(live)

    def _add_to_session(self, element: dict[str, Any], order: tuple[int, int, int], watermark: int) -> bool:
        ts = order[0]
        assigner = self.spec.assigner
        assert isinstance(assigner, EventTimeSessionWindows)
        (own,) = assigner.assign(ts)
        cap = assigner.max_length.millis if assigner.max_length is not None else None
        start, end, last = own.start, own.end, ts
        members: list[Pane] = []
        for pane in sorted(self.panes.values(), key=lambda p: p.window):
            if pane.start > own.end or pane.end < own.start:
                continue
            new_start, new_last = min(start, pane.start), max(last, pane.last)
            if cap is not None and new_last >= new_start + cap:
                continue
            members.append(pane)
            start, end, last = new_start, max(end, pane.end), new_last
        if cap is not None:
            end = min(end, start + cap)
        if end + self.spec.lateness <= watermark:
            return False
        merged = self._merge(members, start, end, ts)
        self._insert(merged, element, order, watermark)
        return True

    def _merge(self, members: list[Pane], start: int, end: int, ts: int) -> Pane:
        if len(members) == 1 and members[0].window == (start, end):
            return members[0]
        pane = self._pane(start, end, ts)
        for member in members:
            pane.contents = self.contents.merge(pane.contents, member.contents)
            pane.size += member.size
            pane.pending += member.pending
            pane.last = max(pane.last, member.last)
            if member.next_fire is not None:
                pane.next_fire = (
                    member.next_fire if pane.next_fire is None else min(pane.next_fire, member.next_fire)
                )
            self._drop(member.window)
        return self._register(pane)

    def _insert(
        self, pane: Pane, element: dict[str, Any], order: tuple[int, int, int], watermark: int
    ) -> None:
        pane.contents = self.contents.add(pane.contents, element, order)
        pane.size += 1
        pane.last = max(pane.last, order[0])
        if self.spec.evict is not None and pane.size > self.spec.evict:
            pane.contents = pane.contents[-self.spec.evict :]
            pane.size = self.spec.evict
        self.changed.add(pane.window)
        trigger = self.spec.trigger
        if trigger.kind == COUNT:
            pane.pending += 1
            if pane.pending >= trigger.count:
                pane.pending = 0
                self._fire(pane, False)
        elif self.spec.timed and pane.end <= watermark:
            pane.fired = True
            pane.next_fire = None
            self._fire(pane, True)

    # -- panes -----------------------------------------------------------------------------------------------------
    def _new_pane(self, start: int, end: int, ts: int) -> Pane:
        return self._register(self._pane(start, end, ts))

    def _pane(self, start: int, end: int, ts: int) -> Pane:
        pane = Pane(start, end, self.contents.empty())
        if self.spec.trigger.kind == CONTINUOUS:
            pane.next_fire = _next_multiple(ts, self.spec.trigger.interval)
        return pane

    def _register(self, pane: Pane) -> Pane:
        self.panes[pane.window] = pane
        self.removed.discard(pane.window)
        self.changed.add(pane.window)
        return pane

    def _fire(self, pane: Pane, late: bool) -> None:
        self.changed.add(pane.window)
        if pane.size == 0:
            return
        self.fire(pane, late)
        if self.spec.trigger.purge:
            pane.contents = self.contents.empty()
            pane.size = 0

    def _drop(self, key: tuple[int, int]) -> None:
        self.panes.pop(key, None)
        self.changed.discard(key)
        self.removed.add(key)


def _next_multiple(ts: int, interval: int) -> int:
    """The smallest multiple of `interval` strictly after `ts`."""
    return (ts // interval + 1) * interval
