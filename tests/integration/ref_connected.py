"""Plain-Python references of `connected_jobs`, fed with the epochs Spark logged: within an epoch, a key's elements
of both inputs meet in the connected order (event time, then input — events before limits —, then partition and
offset)."""

from __future__ import annotations

import pickle
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ethereal_kafka.testing.epochs import Epoch, split_by_epochs
from tests.integration.connected_jobs import BOUND_MS, FOLLOW_UP_MS


@dataclass(frozen=True)
class Record:
    """An input record of either topic: where it sits and its fields (`limit` None for an event)."""

    partition: int
    offset: int
    id: int
    user: str
    ts: int
    amount: int | None = None
    limit: int | None = None

    @property
    def value(self) -> dict[str, Any]:
        """The JSON value."""
        if self.limit is None:
            return {"id": self.id, "user": self.user, "amount": self.amount, "ts": self.ts}
        return {"id": self.id, "user": self.user, "limit": self.limit, "ts": self.ts}


def scripted(start: int) -> tuple[list[Record], list[Record]]:
    """User `vip`: limit 100, an event of 50 (ok), limit 20, an event of 50 (over), the limit removed, an event of
    50 (ok) — at the head of both topics, so the first epoch reads them all."""
    events = [Record(0, i, 900_000 + i, "vip", start + 1_500 + i * 1_000, amount=50) for i in range(3)]
    limits = [
        Record(0, i, 900_000 + i, "vip", start + 1_000 + i * 1_000, limit=lim)
        for i, lim in enumerate((100, 20, 0))
    ]
    return events, limits


def make_inputs(
    seed: int, events: int, limits: int, users: int, start: int
) -> tuple[list[Record], list[Record]]:
    """`scripted` records, then `events` events over 2 partitions (~200 ms apart, out of order within the bound)
    and `limits` limit changes over 1 partition spread over the same time (a tenth remove the limit)."""
    rng = random.Random(seed)
    head_events, head_limits = scripted(start)
    offsets = [len(head_events), 0]
    out_events = list(head_events)
    for i in range(events):
        ts = start + 5_000 + i * 200 + rng.randint(-BOUND_MS + 500, BOUND_MS - 500)
        partition = rng.randint(0, 1)
        out_events.append(
            Record(
                partition,
                offsets[partition],
                i,
                f"u{rng.randint(0, users - 1)}",
                ts,
                amount=rng.randint(1, 60),
            )
        )
        offsets[partition] += 1
    out_limits = list(head_limits)
    span = events * 200
    for i in range(limits):
        ts = start + 5_000 + i * span // max(limits, 1) + rng.randint(-BOUND_MS + 500, BOUND_MS - 500)
        limit = 0 if rng.random() < 0.1 else rng.randint(10, 60)
        out_limits.append(Record(0, len(out_limits), i, f"u{rng.randint(0, users - 1)}", ts, limit=limit))
    return out_events, out_limits


def feed_list(records: Sequence[Record]) -> list[tuple[int, str, dict[str, Any], int]]:
    """The records as `api_helpers.feed_events` takes them."""
    return [(r.partition, r.user, r.value, r.ts) for r in records]


def split(records: Sequence[Record], epochs: Sequence[Epoch], topic: str) -> list[list[Record]]:
    """Each epoch's records of `topic` (whichever source of the query reads it)."""
    for source in range(len(epochs[0].ends) if epochs else 0):
        if any(t == topic for t, _ in epochs[-1].ends[source]):
            parts = split_by_epochs(records, lambda r: (topic, r.partition, r.offset), epochs, source)
            assert sum(map(len, parts)) == len(records), "every record was read by some epoch"
            return parts
    raise AssertionError(f"no source of the query reads {topic}")


def min_watermarks(*inputs: list[list[Record]]) -> list[int]:
    """Each epoch's watermark of a query over watermarked `inputs` (each split by epoch, `split`) under the min
    policy, restart or not: the smallest over the inputs of their largest event time read in earlier epochs, less
    the bound, never lower than the epoch before (0 while an input has read nothing)."""
    expected, seen = [0], [0] * len(inputs)
    for k in range(1, len(inputs[0])):
        for i, parts in enumerate(inputs):
            seen[i] = max([seen[i], *(r.ts for r in parts[k - 1])])
        moved = min(seen) - BOUND_MS if all(seen) else 0
        expected.append(max(expected[-1], moved))
    return expected


def limit_check(events: list[list[Record]], limits: list[list[Record]]) -> list[dict[str, Any]]:
    """`connected_jobs.LimitCheck`'s output, epoch by epoch."""
    limit: dict[str, int] = {}
    seen: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for epoch_events, epoch_limits in zip(events, limits, strict=True):
        rows = [(r.ts, 1, r.partition, r.offset, r) for r in epoch_events]
        rows += [(r.ts, 2, r.partition, r.offset, r) for r in epoch_limits]
        for _, _, _, _, r in sorted(rows, key=lambda x: x[:4]):
            if r.limit is None:
                seen[r.user] = seen.get(r.user, 0) + 1
                lim = limit.get(r.user)
                verdict = "over" if lim is not None and (r.amount or 0) > lim else "ok"
                out.append(
                    {
                        "user": r.user,
                        "id": r.id,
                        "amount": r.amount,
                        "lim": lim,
                        "verdict": verdict,
                        "n": seen[r.user],
                    }
                )
            else:
                if r.limit == 0:
                    limit.pop(r.user, None)
                    verdict = "clear"
                else:
                    limit[r.user] = r.limit
                    verdict = "set"
                row = {"user": r.user, "id": r.id, "amount": None, "lim": r.limit or None, "verdict": verdict}
                out.append({**row, "n": seen.get(r.user, 0)})
    return out


def as_rule(r: Record) -> tuple[str, str, float | None]:
    """`connected_jobs.RULE_COLUMNS` of a limit record: (rule, kind, threshold)."""
    assert r.limit is not None
    kind = "reset" if r.id % 11 == 10 else "total" if r.id % 7 == 6 else "amount"
    threshold = None if r.limit == 0 else float(r.limit * 20 if r.id % 7 == 6 else r.limit)
    return f"r{r.user}", kind, threshold


def rule_alerts(events: list[list[Record]], limits: list[list[Record]]) -> list[dict[str, Any]]:
    """`examples.fraud_rules.RuleDetector`'s alerts over events and limits-as-rules, epoch by epoch."""
    return timed_rule_alerts(events, limits, None)


def timed_rule_alerts(
    events: list[list[Record]], limits: list[list[Record]], watermarks: Sequence[int] | None
) -> list[dict[str, Any]]:
    """`rule_alerts`, plus (given each epoch's watermark) `connected_jobs.FollowedRuleDetector`'s follow-ups.

    The two inputs have a watermark strategy each, so the operator knows no single bound and its watermark stays
    the epoch's W: a card's due timers fire in time order before the epoch's rows and, when registered due,
    after them (`plan.operators.broadcast`).
    """
    rules: dict[str, dict[str, Any]] = {}
    totals: dict[str, float] = {}
    timers: dict[str, set[int]] = {}
    out: list[dict[str, Any]] = []

    def fire(watermark: int) -> None:
        for user in sorted(timers):
            for at in sorted(t for t in timers[user] if t <= watermark):
                timers[user].discard(at)
                out.append(
                    {
                        "card": user,
                        "tx_id": None,
                        "rule": "follow-up",
                        "kind": "timer",
                        "threshold": float(len(rules)),
                        "value": round(totals.get(user, 0.0), 2),
                        "ts": at,
                    }
                )

    for index, (epoch_events, epoch_limits) in enumerate(zip(events, limits, strict=True)):
        watermark = watermarks[index] if watermarks is not None else None
        if watermark is not None:
            fire(watermark)
        rows = [(r.ts, 1, r.partition, r.offset, r) for r in epoch_events]
        rows += [(r.ts, 2, r.partition, r.offset, r) for r in epoch_limits]
        for _, _, _, _, r in sorted(rows, key=lambda x: x[:4]):
            if r.limit is not None:
                name, kind, threshold = as_rule(r)
                if kind == "reset":
                    totals.clear()
                elif threshold is None:
                    rules.pop(name, None)
                else:
                    rules[name] = {"kind": kind, "threshold": threshold}
                continue
            amount = float(r.amount or 0)
            totals[r.user] = totals.get(r.user, 0.0) + amount
            for name in sorted(rules, key=lambda n: pickle.dumps(n, protocol=5)):
                rule = rules[name]
                seen = amount if rule["kind"] == "amount" else totals[r.user]
                if seen > rule["threshold"]:
                    out.append(
                        {
                            "card": r.user,
                            "tx_id": r.id,
                            "rule": name,
                            "kind": rule["kind"],
                            "threshold": rule["threshold"],
                            "value": round(seen, 2),
                            "ts": r.ts,
                        }
                    )
            if watermark is not None:
                timers.setdefault(r.user, set()).add(r.ts + FOLLOW_UP_MS)
        if watermark is not None:
            fire(watermark)
    return out
