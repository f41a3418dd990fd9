"""Plain-Python references of the keyed-operator tests, written from the documented semantics (they do not call the
operator code): per key, epoch by epoch — due timers, the epoch's elements in (event time, partition, offset)
order, each preceded by the event-time timers the key's watermark passes as it follows them (max(W, event time -
bound - 1 ms)), then timers that became due — with the watermark and processing time of each epoch taken from the
epochs Spark logged (the watermark is also recomputed from the data and checked against the log).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ethereal_kafka.testing.epochs import Epoch, read_epochs, split_by_epochs
from tests.integration.keyed_jobs import BOUND_MS, SLOT_MS, TTL_MS


@dataclass(frozen=True)
class Event:
    """One input record: where it sits in the topic and its fields."""

    partition: int
    offset: int
    id: int
    user: str
    amount: int
    ts: int

    @property
    def value(self) -> dict[str, Any]:
        """The JSON value."""
        return {"id": self.id, "user": self.user, "amount": self.amount, "ts": self.ts}


def make_events(seed: int, count: int, users: int, start: int, late_every: int = 17) -> list[Event]:
    """`count` events over `users` users and 2 partitions, ~400 ms apart in event time, out of order within the
    watermark bound, and every `late_every`-th one 20 s behind (late for any watermark)."""
    rng = random.Random(seed)
    offsets = [0, 0]
    events = []
    for i in range(count):
        ts = start + i * 400 + rng.randint(-BOUND_MS + 500, BOUND_MS - 500)
        if late_every and i % late_every == late_every - 1:
            ts -= 20_000
        partition = rng.randint(0, 1)
        events.append(
            Event(partition, offsets[partition], i, f"u{rng.randint(0, users - 1)}", rng.randint(1, 60), ts)
        )
        offsets[partition] += 1
    return events


def feed_list(events: Sequence[Event]) -> list[tuple[int, str, dict[str, Any], int]]:
    """The events as `api_helpers.feed_events` takes them (per-partition order = offset order)."""
    return [(e.partition, e.user, e.value, e.ts) for e in events]


def committed_epochs(query_checkpoint: Path) -> list[Epoch]:
    """The epochs a query logged and completed (an epoch a stop interrupted is logged but not committed)."""
    done = {int(p.name) for p in (query_checkpoint / "commits").iterdir() if p.name.isdigit()}
    return [e for e in read_epochs(query_checkpoint) if e.batch_id in done]


def by_epoch(
    events: Sequence[Event], epochs: Sequence[Epoch], topic: str, event_time: bool = True
) -> list[list[Event]]:
    """Each epoch's events, in processing order: (event time, partition, offset), or (partition, offset) on a
    stream without event time."""
    split = split_by_epochs(events, lambda e: (topic, e.partition, e.offset), epochs)
    assert sum(len(s) for s in split) == len(events), "every event was read by some epoch"
    if not event_time:
        return [sorted(s, key=lambda e: (e.partition, e.offset)) for s in split]
    return [sorted(s, key=lambda e: (e.ts, e.partition, e.offset)) for s in split]


def check_watermarks(split: Sequence[Sequence[Event]], epochs: Sequence[Epoch]) -> None:
    """Spark's watermark of epoch N is the largest event time of epochs before N minus the bound (0 before any)."""
    highest = None
    for events, epoch in zip(split, epochs, strict=True):
        expected = 0 if highest is None else max(0, highest - BOUND_MS)
        assert epoch.watermark_ms == expected, (epoch.batch_id, epoch.watermark_ms, expected)
        if events:
            top = max(e.ts for e in events)
            highest = top if highest is None else max(highest, top)


def per_user(records: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Output records grouped by user, in the order they were read."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        out[record["user"]].append(record)
    return dict(out)


# -- StateKinds --------------------------------------------------------------------------------------------------
def state_kinds(split: Sequence[Sequence[Event]]) -> dict[str, list[dict[str, Any]]]:
    """Reference of `keyed_jobs.StateKinds`."""
    count: dict[str, int] = defaultdict(int)
    recent: dict[str, list[int]] = defaultdict(list)
    buckets: dict[str, dict[int, int]] = defaultdict(dict)
    amounts: dict[str, list[int]] = defaultdict(list)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for events in split:
        for e in events:
            count[e.user] += 1
            n = count[e.user]
            recent[e.user] = (recent[e.user] + [e.amount])[-3:]
            table = buckets[e.user]
            table[e.amount % 3] = table.get(e.amount % 3, 0) + e.amount
            bucket_sum = table[e.amount % 3]
            if n % 5 == 0:
                table.pop(0, None)
            amounts[e.user].append(e.amount)
            # MapState iterates in the order of the pickled keys: small ints pickle in numeric order.
            out[e.user].append(
                {
                    "user": e.user,
                    "id": e.id,
                    "n": n,
                    "recent": ",".join(str(a) for a in recent[e.user]),
                    "bucket_sum": bucket_sum,
                    "buckets": ",".join(f"{k}:{v}" for k, v in sorted(table.items())),
                    "mean": sum(amounts[e.user]) / len(amounts[e.user]),
                    "ts": e.ts,
                }
            )
    return dict(out)


# -- SlotTimers ----------------------------------------------------------------------------------------------------
def slot_timers(
    split: Sequence[Sequence[Event]], epochs: Sequence[Epoch]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Reference of `keyed_jobs.SlotTimers`: (main output, cancellations) per user."""
    total: dict[str, int] = defaultdict(int)
    timers: dict[str, set[int]] = defaultdict(set)
    main: dict[str, list[dict[str, Any]]] = defaultdict(list)
    cancelled: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def fire(user: str, wm: int) -> None:
        for at in sorted(t for t in timers[user] if t <= wm):
            timers[user].discard(at)
            main[user].append(
                {"user": user, "kind": "timer", "id": -1, "at": at, "total": total[user], "wm": wm}
            )

    for events, epoch in zip(split, epochs, strict=True):
        w = epoch.watermark_ms
        users = sorted({e.user for e in events} | {u for u, t in timers.items() if any(x <= w for x in t)})
        for user in users:
            wm = w
            fire(user, wm)
            for e in (e for e in events if e.user == user):
                if e.ts - BOUND_MS - 1 > wm:  # the key's watermark follows its elements (before each one)
                    wm = e.ts - BOUND_MS - 1
                    fire(user, wm)
                total[user] += e.amount
                at = (e.ts // SLOT_MS + 1) * SLOT_MS
                if e.amount % 7 == 0:
                    if at in timers[user]:
                        timers[user].discard(at)
                        cancelled[user].append({"user": user, "id": e.id, "at": at})
                else:
                    timers[user].add(at)
                main[user].append(
                    {"user": user, "kind": "element", "id": e.id, "at": e.ts, "total": total[user], "wm": wm}
                )
            fire(user, wm)
    return dict(main), dict(cancelled)


# -- Expiring (TTL, processing-time timers) ------------------------------------------------------------------------
def expiring(
    split: Sequence[Sequence[Event]], epochs: Sequence[Epoch], with_timers: bool
) -> dict[str, list[dict[str, Any]]]:
    """Reference of `keyed_jobs.Expiring` (`with_timers`) / `ExpiringNoTimers`: a value written at processing time
    P lives while the processing time is below P + TTL."""
    last: dict[str, tuple[int, int]] = {}
    seen: dict[str, list[tuple[int, int]]] = defaultdict(list)
    timers: dict[str, set[int]] = defaultdict(set)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def alive_last(user: str, now: int) -> int | None:
        found = last.get(user)
        return found[1] if found is not None and now < found[0] else None

    def alive_seen(user: str, now: int) -> int:
        return sum(1 for expires, _ in seen[user] if now < expires)

    def fire(user: str, now: int) -> None:
        for at in sorted(t for t in timers[user] if t <= now):
            timers[user].discard(at)
            out[user].append(
                {
                    "user": user,
                    "kind": "timer",
                    "id": -1,
                    "prev": alive_last(user, now),
                    "seen": alive_seen(user, now),
                    "at": at,
                }
            )

    for events, epoch in zip(split, epochs, strict=True):
        now = epoch.timestamp_ms
        users = sorted({e.user for e in events} | {u for u, t in timers.items() if any(x <= now for x in t)})
        for user in users:
            fire(user, now)
            for e in (e for e in events if e.user == user):
                previous = alive_last(user, now)
                last[user] = (now + TTL_MS, e.id)
                seen[user].append((now + TTL_MS, e.id))
                if with_timers:
                    timers[user].add(now + 1)
                out[user].append(
                    {
                        "user": user,
                        "kind": "element",
                        "id": e.id,
                        "prev": previous,
                        "seen": alive_seen(user, now),
                        "at": now,
                    }
                )
            fire(user, now)
    return dict(out)


# -- rolling aggregates --------------------------------------------------------------------------------------------
def rolling(split: Sequence[Sequence[Event]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Reference of `keyed_jobs.rolling`, per (kind, user)."""
    first: dict[str, Event] = {}
    total: dict[str, int] = defaultdict(int)
    largest: dict[str, Event] = {}
    counts: dict[str, int] = defaultdict(int)
    out: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)

    def row(kind: str, user: str, i: int, amount: int, count: int = -1, mean: float = -1.0) -> dict[str, Any]:
        return {"kind": kind, "user": user, "id": i, "amount": amount, "count": count, "mean": mean}

    for events in split:
        for e in events:
            u = e.user
            first.setdefault(u, e)
            total[u] += e.amount
            out[("sum", u)].append(row("sum", u, first[u].id, total[u]))  # other fields: the first element's
            if u not in largest or e.amount > largest[u].amount:
                largest[u] = e
            out[("max", u)].append(row("max", u, largest[u].id, largest[u].amount))
            counts[u] += 1
            out[("agg", u)].append(row("agg", u, -1, -1, counts[u], total[u] / counts[u]))
    return dict(out)


# -- Spark-native tumbling count -----------------------------------------------------------------------------------
def native_counts(split: Sequence[Sequence[Event]], epochs: Sequence[Epoch]) -> dict[tuple[str, int], int]:
    """Reference of `keyed_jobs.native_counts` with Spark's semantics: an element of epoch N is dropped when its
    *window* ended at or before the watermark of epoch N-1 (Spark checks late rows of a window aggregation by the
    window's end, not by their own event time); a window is emitted once the watermark reaches its end."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for n, events in enumerate(split):
        late = epochs[n - 1].watermark_ms if n > 0 else 0
        for e in events:
            start = e.ts - e.ts % SLOT_MS
            if late > 0 and start + SLOT_MS <= late:
                continue
            counts[(e.user, start)] += 1
    final = epochs[-1].watermark_ms
    return {k: c for k, c in counts.items() if k[1] + SLOT_MS <= final}


def with_flush(events: Sequence[Event]) -> list[Event]:
    """`events` plus one event per partition far ahead in event time, which moves the watermark past every real
    window (its own window never closes)."""
    top = max(e.ts for e in events) + 10 * SLOT_MS
    ends = [max((e.offset + 1 for e in events if e.partition == p), default=0) for p in (0, 1)]
    return [*events, *(Event(p, ends[p], 10_000 + p, "flush", 0, top) for p in (0, 1))]


def group(records: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> dict[Any, list[Any]]:
    """Records grouped by `key`, in read order."""
    out: dict[Any, list[Any]] = defaultdict(list)
    for record in records:
        out[key(record)].append(record)
    return dict(out)


def dumps(record: dict[str, Any]) -> str:
    """Canonical JSON for comparing records."""
    return json.dumps(record, sort_keys=True)


# -- the fraud example ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tx:
    """One input transaction and where it sits in the topic."""

    partition: int
    offset: int
    value: dict[str, Any]


def fraud_input(transactions: Sequence[dict[str, Any]], seed: int) -> list[Tx]:
    """Spread transactions over 2 partitions at random (a card's transactions land in both)."""
    rng = random.Random(seed)
    offsets = [0, 0]
    out = []
    for value in transactions:
        p = rng.randint(0, 1)
        out.append(Tx(p, offsets[p], value))
        offsets[p] += 1
    return out


def fraud(
    split: Sequence[Sequence[Tx]], epochs: Sequence[Epoch]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Reference of `examples.fraud` (alerts, rejected) per card: a small transaction (< 1.00) is remembered until
    the watermark reaches its time + 60 s; a large one (> 500.00) 0..60 s after a remembered small one alerts."""
    small: dict[str, dict[str, Any]] = {}
    alerts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rejected: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def expire(card: str, wm: int) -> None:
        if card in small and small[card]["ts"] + 60_000 <= wm:
            del small[card]

    for txs, epoch in zip(split, epochs, strict=True):
        wm = epoch.watermark_ms
        for card in sorted({t.value["card"] for t in txs} | set(small)):
            expire(card, wm)
            mine = sorted(
                (t for t in txs if t.value["card"] == card),
                key=lambda t: (t.value["ts"], t.partition, t.offset),
            )
            for t in mine:
                v = t.value
                if v["amount"] <= 0:
                    rejected[card].append(
                        {
                            "tx_id": v["tx_id"],
                            "card": card,
                            "amount": v["amount"],
                            "reason": "non-positive amount",
                        }
                    )
                    continue
                found = small.get(card)
                if found is not None and v["amount"] > 500 and 0 <= v["ts"] - found["ts"] <= 60_000:
                    alerts[card].append(
                        {
                            "card": card,
                            "small_tx": found["tx_id"],
                            "large_tx": v["tx_id"],
                            "small_amount": found["amount"],
                            "large_amount": v["amount"],
                            "ts": v["ts"],
                        }
                    )
                    del small[card]
                if v["amount"] < 1:
                    small[card] = v
            expire(card, wm)
    return dict(alerts), dict(rejected)
