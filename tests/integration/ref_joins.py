"""Plain-Python references of the joins, written from the documented semantics (docs/operators-joins.md) without
the operator code: they take the input events, the epoch each event was read in and the watermarks Spark logged
(`testing.epochs`), and return the expected output elements as a multiset.

Watermarks: `watermarks[n]` is epoch n's watermark (ms). Spark-native joins drop a (row, window) whose window ended
at or before the *previous* epoch's watermark (a row, for the interval join, whose own time is at or before it) and
close a window at the end of the first epoch whose watermark reaches its end. The framework's join closes windows
at the *start* of such an epoch, so a row is late once its window's end is at or before its own epoch's watermark.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Window = tuple[int, int]


@dataclass(frozen=True)
class Event:
    """One input record of a join test: key `k`, id, event time `ts` (ms), the epoch it was read in, and its
    source position."""

    k: str
    id: str
    ts: int
    epoch: int
    partition: int = -1
    offset: int = -1

    def element(self) -> dict[str, Any]:
        """The element a join function sees."""
        return {"k": self.k, "id": self.id, "ts": self.ts}


def tumbling(size: int) -> Callable[[int], list[Window]]:
    """Windows `[start, start + size)` with start a multiple of `size`."""
    return lambda ts: [(ts - ts % size, ts - ts % size + size)]


def sliding(size: int, slide: int) -> Callable[[int], list[Window]]:
    """Every window `[s, s + size)`, `s` a multiple of `slide`, that holds `ts`."""

    def assign(ts: int) -> list[Window]:
        first = (ts - size) // slide * slide
        return [(s, s + size) for s in range(first, ts + 1, slide) if s <= ts < s + size]

    return assign


def _previous(watermarks: Sequence[int], epoch: int) -> int:
    return watermarks[epoch - 1] if epoch > 0 else 0


def _kept(
    events: Iterable[Event], assign: Callable[[int], list[Window]], late: Callable[[Window, Event], bool]
) -> dict[tuple[str, Window], list[Event]]:
    out: dict[tuple[str, Window], list[Event]] = defaultdict(list)
    for event in events:
        for window in assign(event.ts):
            if not late(window, event):
                out[(event.k, window)].append(event)
    return out


def native_window_join(
    how: str,
    lefts: Sequence[Event],
    rights: Sequence[Event],
    assign: Callable[[int], list[Window]],
    watermarks: Sequence[int],
) -> Counter[tuple[Any, ...]]:
    """Spark's windowed join: `(left id | None, right id | None, key, window start, window end)` per output row.

    Pairs: every left and right (row, window) of one key that were not late. Outer rows: the unmatched (row,
    window)s of a window that closed within the logged epochs. Semi: each matched left (row, window), once.
    """
    closed_until = max(watermarks, default=0)

    def late(window: Window, event: Event) -> bool:
        return window[1] <= _previous(watermarks, event.epoch)

    left_by, right_by = _kept(lefts, assign, late), _kept(rights, assign, late)
    out: Counter[tuple[Any, ...]] = Counter()
    for group in set(left_by) | set(right_by):
        key, window = group
        ls, rs = left_by.get(group, []), right_by.get(group, [])
        if how == "semi":
            out.update((a.id, None, key, *window) for a in ls if rs)
            continue
        out.update((a.id, b.id, key, *window) for a in ls for b in rs)
        closed = window[1] <= closed_until
        if closed and not rs and how in ("left", "full"):
            out.update((a.id, None, key, *window) for a in ls)
        if closed and not ls and how in ("right", "full"):
            out.update((None, b.id, key, *window) for b in rs)
    return out


def framework_window_join(
    how: str,
    lefts: Sequence[Event],
    rights: Sequence[Event],
    assign: Callable[[int], list[Window]],
    watermarks: Sequence[int],
) -> Counter[tuple[Any, ...]]:
    """The framework's windowed join (anti): each window's join computed when it closes ("watermark first")."""
    closed_until = max(watermarks, default=0)

    def late(window: Window, event: Event) -> bool:
        return window[1] <= watermarks[event.epoch]

    left_by, right_by = _kept(lefts, assign, late), _kept(rights, assign, late)
    out: Counter[tuple[Any, ...]] = Counter()
    for group in set(left_by) | set(right_by):
        key, window = group
        if window[1] > closed_until:
            continue
        ls, rs = left_by.get(group, []), right_by.get(group, [])
        if how == "anti":
            out.update((a.id, None, key, *window) for a in ls if not rs)
        elif how == "semi":
            out.update((a.id, None, key, *window) for a in ls if rs)
        else:
            raise ValueError(f"no framework reference for {how}")
    return out


def interval_join(
    lefts: Sequence[Event], rights: Sequence[Event], lower: int, upper: int, watermarks: Sequence[int]
) -> Counter[tuple[Any, ...]]:
    """Spark's interval join: `(left id, right id, key)` for every pair of rows not late on arrival (event time
    after the previous epoch's watermark) with `left.ts + lower <= right.ts <= left.ts + upper`."""

    def fresh(events: Sequence[Event]) -> list[Event]:
        return [e for e in events if e.ts > _previous(watermarks, e.epoch)]

    by_key: dict[str, list[Event]] = defaultdict(list)
    for b in fresh(rights):
        by_key[b.k].append(b)
    return Counter(
        (a.id, b.id, a.k)
        for a in fresh(lefts)
        for b in by_key.get(a.k, [])
        if a.ts + lower <= b.ts <= a.ts + upper
    )


def framework_session_join(
    how: str, lefts: Sequence[Event], rights: Sequence[Event], gap: int, watermarks: Sequence[int]
) -> Counter[tuple[Any, ...]]:
    """The framework's join over session windows, simulated epoch by epoch: sessions that end at or before the
    epoch's watermark close (and emit their join) first; then the epoch's elements are added in order (event time,
    partition, offset, left before right), each opening `[ts, ts + gap)` and merging with the sessions of its key
    that overlap or touch it; an element whose merged session ends at or before the watermark is late (dropped)."""
    sessions: dict[str, list[list[Any]]] = defaultdict(list)  # key -> [start, end, lefts, rights]
    out: Counter[tuple[Any, ...]] = Counter()
    tagged = [(e, 0) for e in lefts] + [(e, 1) for e in rights]
    for epoch, watermark in enumerate(watermarks):
        for key, open_sessions in sessions.items():
            for session in [s for s in open_sessions if s[1] <= watermark]:
                open_sessions.remove(session)
                out.update(_session_rows(how, key, session))
        arriving = sorted(
            (e for e in tagged if e[0].epoch == epoch),
            key=lambda t: (t[0].ts, t[0].partition, t[0].offset, t[1]),
        )
        for event, side in arriving:
            start, end = event.ts, event.ts + gap
            members = [s for s in sessions[event.k] if not (s[0] > end or s[1] < start)]
            for member in members:
                start, end = min(start, member[0]), max(end, member[1])
            if end <= watermark:
                continue
            merged = [start, end, [], []]
            for member in members:
                sessions[event.k].remove(member)
                merged[2] += member[2]
                merged[3] += member[3]
            merged[2 + side].append(event)
            sessions[event.k].append(merged)
    return out


def _session_rows(how: str, key: str, session: list[Any]) -> list[tuple[Any, ...]]:
    start, end, ls, rs = session
    window = (start, end)
    if how == "anti":
        return [(a.id, None, key, *window) for a in ls if not rs]
    if how == "semi":
        return [(a.id, None, key, *window) for a in ls if rs]
    rows = [(a.id, b.id, key, *window) for a in ls for b in rs]
    if not rs and how in ("left", "full"):
        rows += [(a.id, None, key, *window) for a in ls]
    if not ls and how in ("right", "full"):
        rows += [(None, b.id, key, *window) for b in rs]
    return rows
