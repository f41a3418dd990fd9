"""Fraud rule with keyed state and an event-time timer: per card, flag a large transaction that follows a small one
within a minute (a thief tests a stolen card with a tiny purchase, then spends big).

    ethereal-kafka run connectors/examples/fraud-job.properties

Input (`transactions`, JSON): `{"tx_id": long, "card": string, "amount": double, "ts": epoch ms}`, event time
`ts` with 5 s of out-of-orderness. Per card (`key_by("card")`), `FraudDetector` keeps the last small transaction
(amount below `SMALL`) in a `ValueState` and registers an event-time timer one minute after it, which forgets it.
A large transaction (above `LARGE`) at most one minute after the small one, in event time, while it is still
remembered, raises an alert (`alerts`) and forgets it too. Transactions with a non-positive amount go to the
`rejected` side output. Each epoch's elements are seen in event-time order, so out-of-order delivery within the
bound does not matter; a transaction that arrives after its small partner's timer fired is not matched.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from ethereal_kafka.api import (
    KeyedContext,
    KeyedProcessFunction,
    OutputTag,
    RuntimeContext,
    StreamExecutionEnvironment,
    Time,
    ValueStateDescriptor,
    WatermarkStrategy,
)

SMALL = 1.00
LARGE = 500.00
WITHIN_MS = 60_000
OUT_OF_ORDER_MS = 5_000
TRANSACTION_DDL = "tx_id long, card string, amount double, ts long"
ALERT_DDL = "card string, small_tx long, large_tx long, small_amount double, large_amount double, ts long"
REJECTED = OutputTag("rejected", "tx_id long, card string, amount double, reason string")


class FraudDetector(KeyedProcessFunction):
    """Small-then-large within a minute, per card (see the module docstring)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.small = runtime_context.get_state(ValueStateDescriptor("small"))
        self.timer = runtime_context.get_state(ValueStateDescriptor("timer"))

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        amount, ts = value["amount"], value["ts"]
        if amount is None or amount <= 0:
            reason = "missing amount" if amount is None else "non-positive amount"
            ctx.output(REJECTED, {**{k: value[k] for k in ("tx_id", "card", "amount")}, "reason": reason})
            return
        small = self.small.value()
        if small is not None and amount > LARGE and 0 <= ts - small["ts"] <= WITHIN_MS:
            yield {
                "card": ctx.get_current_key(),
                "small_tx": small["tx_id"],
                "large_tx": value["tx_id"],
                "small_amount": small["amount"],
                "large_amount": amount,
                "ts": ts,
            }
            self._forget(ctx)
        if amount < SMALL:
            self._forget(ctx)
            self.small.update({"tx_id": value["tx_id"], "amount": amount, "ts": ts})
            self.timer.update(ts + WITHIN_MS)
            ctx.timer_service().register_event_time_timer(ts + WITHIN_MS)

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> None:
        self.small.clear()
        self.timer.clear()

    def _forget(self, ctx: KeyedContext) -> None:
        pending = self.timer.value()
        if pending is not None:
            ctx.timer_service().delete_event_time_timer(pending)
        self.small.clear()
        self.timer.clear()


def build(env: StreamExecutionEnvironment) -> None:
    """The job's pipeline: `transactions` → `FraudDetector` per card → `alerts` (and `rejected`)."""
    alerts = (
        env.from_source("transactions")
        .select("tx_id", "card", "amount", "ts")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(
                Time.milliseconds(OUT_OF_ORDER_MS)
            ).with_timestamp_assigner("ts")
        )
        .key_by("card")
        .process(FraudDetector(), output_type=ALERT_DDL, side_outputs=[REJECTED])
    )
    alerts.sink_to("alerts")
    alerts.get_side_output(REJECTED).sink_to("rejected")


def transactions(
    count: int, cards: int = 20, seed: int = 7, start_ms: int = 1_700_000_000_000
) -> list[dict[str, Any]]:
    """Demo input: `count` transactions over `cards` cards, ~2 s apart, mostly ordinary amounts, some small test
    purchases (some followed by a large one), a few invalid amounts; slightly out of order."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.08:
            amount = round(rng.uniform(0.01, 0.99), 2)
        elif roll < 0.16:
            amount = round(rng.uniform(501, 3000), 2)
        elif roll < 0.18:
            amount = 0.0
        else:
            amount = round(rng.uniform(2, 400), 2)
        ts = start_ms + i * 2_000 + rng.randint(-OUT_OF_ORDER_MS // 2, OUT_OF_ORDER_MS // 2)
        out.append({"tx_id": i, "card": f"card-{rng.randint(1, cards)}", "amount": amount, "ts": ts})
    return out
