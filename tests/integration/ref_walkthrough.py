"""Plain-Python references of Flink's fraud-detection walkthrough with event-time timers (`examples.fraud_walkthrough`),
written from the semantics (they do not call the operator code):

- `flink`: what Flink computes — one stream in the order the transactions were produced, a watermark after every
  record (the largest event time so far minus the bound minus 1 ms: Flink's bounded-out-of-orderness generator
  emitting per record), and every timer at or before the watermark firing before the next record;
- `interleaved`: the framework's documented rule, fed with the epochs Spark logged — per key and epoch, timers due
  at the epoch's watermark W, then the key's transactions in (event time, partition, offset) order, each preceded
  by the timers at or before max(W, its event time - bound - 1 ms);
- `epoch_only`: the rule before issue 24 (timers only at W, before and after the key's transactions), to show what
  a port got then.

Alerts are `{"id": account, "ts": event time of the large transaction}` per account, in emission order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ethereal_kafka.examples.fraud_walkthrough import LARGE_AMOUNT, ONE_MINUTE, SMALL_AMOUNT
from ethereal_kafka.testing.epochs import Epoch
from tests.integration.ref_keyed import Tx

Alerts = dict[int, list[dict[str, Any]]]


class _Detector:
    """The walkthrough's per-account state: the flag and its timer."""

    def __init__(self) -> None:
        self.timer: dict[
            int, int
        ] = {}  # account -> pending timer (the flag is set exactly while one is pending)
        self.alerts: Alerts = defaultdict(list)

    def fire(self, account: int, watermark: int) -> None:
        if account in self.timer and self.timer[account] <= watermark:
            del self.timer[account]

    def due(self, watermark: int) -> list[int]:
        return sorted(a for a, t in self.timer.items() if t <= watermark)

    def process(self, value: dict[str, Any]) -> None:
        account, amount, ts = value["account_id"], value["amount"], value["ts"]
        if account in self.timer:
            if amount > LARGE_AMOUNT:
                self.alerts[account].append({"id": account, "ts": ts})
            del self.timer[account]
        if amount < SMALL_AMOUNT:
            self.timer[account] = ts + ONE_MINUTE


def flink(stream: Sequence[Tx], bound_ms: int) -> Alerts:
    """Flink's alerts for the transactions in stream order (see the module docstring)."""
    detector = _Detector()
    highest: int | None = None
    for tx in stream:
        if highest is not None:
            for account in detector.due(highest - bound_ms - 1):
                detector.fire(account, highest - bound_ms - 1)
        detector.process(tx.value)
        highest = tx.value["ts"] if highest is None else max(highest, tx.value["ts"])
    return dict(detector.alerts)


def interleaved(split: Sequence[Sequence[Tx]], epochs: Sequence[Epoch], bound_ms: int | None) -> Alerts:
    """The framework's alerts epoch by epoch (`bound_ms=None`: `epoch_only`)."""
    detector = _Detector()
    for txs, epoch in zip(split, epochs, strict=True):
        w = epoch.watermark_ms
        accounts = sorted({t.value["account_id"] for t in txs} | set(detector.due(w)))
        for account in accounts:
            watermark = w
            detector.fire(account, watermark)
            mine = sorted(
                (t for t in txs if t.value["account_id"] == account),
                key=lambda t: (t.value["ts"], t.partition, t.offset),
            )
            for tx in mine:
                if bound_ms is not None:
                    watermark = max(watermark, tx.value["ts"] - bound_ms - 1)
                    detector.fire(account, watermark)
                detector.process(tx.value)
            detector.fire(account, watermark)
    return dict(detector.alerts)


def epoch_only(split: Sequence[Sequence[Tx]], epochs: Sequence[Epoch]) -> Alerts:
    """The alerts of the rule before issue 24: timers fire only at the epoch's watermark."""
    return interleaved(split, epochs, None)


def count(alerts: Alerts) -> int:
    """How many alerts."""
    return sum(len(a) for a in alerts.values())
