"""Plain-Python references of the window operators, written from the documented semantics (docs/operators-windows.md)
without the operator code: they take the input records and the epochs Spark logged (`read_epochs`: end offsets and
watermarks) and say what each key's output must be.

- `framework`: the framework operator ("watermark first": at the start of each epoch fire what the watermark made
  due and drop windows past their lateness, then add the epoch's records in event-time/partition/offset order).
  Windows keep their raw records here, and results are computed from them when a window fires.
- `count_windows`: count and global windows of the framework operator (arrival order).
- `native`: Spark's own window aggregation (a record is dropped from a window that ended at or before the previous
  epoch's watermark; a window is emitted once, in the first epoch whose watermark reaches its end).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ethereal_kafka.testing.epochs import Epoch, split_by_epochs


@dataclass(frozen=True)
class Rec:
    """An input record as a window sees it."""

    partition: int
    offset: int
    key: str
    ts: int
    amount: int
    topic: str = ""

    def order(self) -> tuple[int, int, int]:
        """Processing order within an epoch."""
        return (self.ts, self.partition, self.offset)


Result = Callable[[list[Rec], tuple[int, int]], list[dict[str, Any]]]


@dataclass
class Output:
    """What a window operator emitted, per key, in order, each item with the epoch that emitted it."""

    fired: dict[str, list[tuple[int, tuple[int, int, dict[str, Any]]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    late: dict[str, list[tuple[int, Rec]]] = field(default_factory=lambda: defaultdict(list))


def per_epoch(records: Sequence[Rec], epochs: Sequence[Epoch], topic: str = "") -> list[list[Rec]]:
    """The records each epoch read (from any of its sources), in processing order; `topic` for records without one."""
    merged = [
        Epoch(
            e.batch_id, e.watermark_ms, e.timestamp_ms, ({k: v for ends in e.ends for k, v in ends.items()},)
        )
        for e in epochs
    ]
    split = split_by_epochs(records, lambda r: (r.topic or topic, r.partition, r.offset), merged)
    return [sorted(batch, key=Rec.order) for batch in split]


# -- framework time windows --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trig:
    """A trigger: `event` (default), `count` (every n), `continuous` (every `every` ms); `purge` after firing."""

    kind: str = "event"
    n: int = 0
    every: int = 0
    purge: bool = False


@dataclass
class _Win:
    start: int
    end: int
    recs: list[Rec] = field(default_factory=list)
    done: bool = False  # the end firing happened
    pending: int = 0
    point: int | None = None  # next continuous point
    newest: int = -(2**62)


def framework(
    batches: list[list[Rec]],
    watermarks: list[int],
    windows_of: Callable[[int], list[tuple[int, int]]] | None,
    result: Result,
    lateness: int = 0,
    trig: Trig = Trig(),
    gap: int = 0,
    max_length: int | None = None,
) -> Output:
    """The framework operator over time windows (`windows_of(ts)`), or sessions when `gap` is set."""
    out = Output()
    state: dict[str, dict[tuple[int, int], _Win]] = defaultdict(dict)
    epoch = 0

    def emit(key: str, w: _Win) -> None:
        if not w.recs:
            return
        for r in result(sorted(w.recs, key=Rec.order), (w.start, w.end)):
            out.fired[key].append((epoch, (w.start, w.end, r)))
        if trig.purge:
            w.recs = []

    for epoch, (batch, wm) in enumerate(zip(batches, watermarks, strict=True)):
        for key in sorted(state):
            for span in sorted(state[key]):
                w = state[key][span]
                if trig.kind != "count" and not w.done and w.end <= wm:
                    w.done = True
                    emit(key, w)
                elif trig.kind == "continuous" and w.point is not None and w.point <= wm and w.point < w.end:
                    w.point = (wm // trig.every + 1) * trig.every
                    emit(key, w)
                if w.end + lateness <= wm:
                    del state[key][span]
        for rec in batch:
            key = rec.key
            if gap:
                target = _session_for(state[key], rec, gap, max_length)
                if target is None or target[1] + lateness <= wm:
                    out.late[key].append((epoch, rec))
                    continue
                start, end, merged = target
                if len(merged) == 1 and (merged[0].start, merged[0].end) == (start, end):
                    w = merged[0]
                else:
                    w = _Win(start, end)
                    if trig.kind == "continuous":
                        own = (rec.ts // trig.every + 1) * trig.every
                        w.point = min([own, *(o.point for o in merged if o.point is not None)])
                    for old in merged:
                        w.recs += old.recs
                        w.pending += old.pending
                        w.newest = max(w.newest, old.newest)
                        del state[key][(old.start, old.end)]
                state[key][(start, end)] = w
                targets = [w]
            else:
                spans = [s for s in windows_of(rec.ts) if s[1] + lateness > wm]
                if not spans:
                    out.late[key].append((epoch, rec))
                    continue
                targets = []
                for span in spans:
                    if span not in state[key]:
                        w = _Win(*span)
                        if trig.kind == "continuous":
                            w.point = (rec.ts // trig.every + 1) * trig.every
                        state[key][span] = w
                    targets.append(state[key][span])
            for w in targets:
                w.recs.append(rec)
                w.newest = max(w.newest, rec.ts)
                if trig.kind == "count":
                    w.pending += 1
                    if w.pending == trig.n:
                        w.pending = 0
                        emit(key, w)
                elif w.end <= wm:
                    w.done = True
                    emit(key, w)
    return out


def _session_for(
    sessions: dict[tuple[int, int], _Win], rec: Rec, gap: int, max_length: int | None
) -> tuple[int, int, list[_Win]] | None:
    """The session `rec` makes with the sessions it overlaps or touches (earliest first, each only while every
    record stays within `max_length` of the first)."""
    lo, hi, newest = rec.ts, rec.ts + gap, rec.ts
    merged = []
    for span in sorted(sessions):
        w = sessions[span]
        if w.start > rec.ts + gap or w.end < rec.ts:
            continue
        start, latest = min(lo, w.start), max(newest, w.newest)
        if max_length is not None and latest - start >= max_length:
            continue
        lo, hi, newest = start, max(hi, w.end), latest
        merged.append(w)
    if max_length is not None:
        hi = min(hi, lo + max_length)
    return lo, hi, merged


def tumbling(size: int) -> Callable[[int], list[tuple[int, int]]]:
    """Tumbling windows of `size` ms."""
    return lambda ts: [(ts - ts % size, ts - ts % size + size)]


def sliding(size: int, slide: int) -> Callable[[int], list[tuple[int, int]]]:
    """Sliding windows: every window `[k * slide, k * slide + size)` holding `ts`."""

    def spans(ts: int) -> list[tuple[int, int]]:
        first = (ts - size) // slide + 1
        return [(k * slide, k * slide + size) for k in range(first, ts // slide + 1)]

    return spans


# -- framework count and global windows --------------------------------------------------------------------------
def count_windows(
    batches: list[list[Rec]],
    result: Callable[[list[Rec]], list[dict[str, Any]]],
    fire_every: int,
    keep_last: int | None = None,
    purge: bool = False,
) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """Count/global windows with a count trigger: per key, records in arrival order (epoch, then processing order);
    every `fire_every` records the window fires with its records (only the last `keep_last` when set); `purge`
    empties it after each firing. Each result comes with the epoch that emitted it."""
    out: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    held: dict[str, list[Rec]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    for epoch, batch in enumerate(batches):
        for rec in batch:
            held[rec.key].append(rec)
            if keep_last is not None:
                held[rec.key] = held[rec.key][-keep_last:]
            counts[rec.key] += 1
            if counts[rec.key] % fire_every == 0:
                out[rec.key] += [(epoch, r) for r in result(list(held[rec.key]))]
                if purge:
                    held[rec.key] = []
    return out


# -- Spark-native windows ----------------------------------------------------------------------------------------
def native(
    batches: list[list[Rec]],
    watermarks: list[int],
    windows_of: Callable[[int], list[tuple[int, int]]] | None = None,
    gap: int = 0,
) -> dict[str, list[tuple[int, int, int, int]]]:
    """Spark's window aggregation of count and sum(amount): per key, `(start, end, count, sum)` of every window
    emitted, sorted. `gap` > 0: session windows (a record opens `[ts, ts + gap)`; touching sessions merge)."""
    out: dict[str, list[tuple[int, int, int, int]]] = defaultdict(list)
    state: dict[str, list[list[int]]] = defaultdict(list)  # [start, end, count, sum]
    previous = 0
    for batch, wm in zip(batches, watermarks, strict=True):
        for rec in batch:
            if gap:
                if rec.ts + gap > previous:
                    state[rec.key].append([rec.ts, rec.ts + gap, 1, rec.amount])
                continue
            assert windows_of is not None
            for start, end in windows_of(rec.ts):
                if end <= previous:
                    continue  # dropped by Spark: the window ended before the previous epoch's watermark
                slot = next((s for s in state[rec.key] if s[:2] == [start, end]), None)
                if slot is None:
                    state[rec.key].append([start, end, 0, 0])
                    slot = state[rec.key][-1]
                slot[2] += 1
                slot[3] += rec.amount
        for key in list(state):
            windows = sorted(state[key])
            if gap:
                windows = _merge_sessions(windows)
            state[key] = [w for w in windows if w[1] > wm]
            out[key] += [(w[0], w[1], w[2], w[3]) for w in windows if w[1] <= wm]
        previous = wm
    return {k: sorted(v) for k, v in out.items()}


def _merge_sessions(windows: list[list[int]]) -> list[list[int]]:
    merged: list[list[int]] = []
    for w in windows:
        if merged and w[0] <= merged[-1][1]:
            last = merged[-1]
            merged[-1] = [last[0], max(last[1], w[1]), last[2] + w[2], last[3] + w[3]]
        else:
            merged.append(list(w))
    return merged
