"""Flink's fraud-detection walkthrough, ported as a Flink engineer ports it, with event-time timers.

    ethereal-kafka run connectors/examples/fraud-walkthrough-job.properties

Flink's `FraudDetector` (the walkthrough's "v2", with state and a timer), line by line: per account, a transaction
below `SMALL_AMOUNT` sets a flag and registers a timer one minute later; the account's next transaction clears the
flag (and deletes the timer), and raises an alert if it is above `LARGE_AMOUNT` while the flag is still set; the
timer alone clears the flag when no transaction came within the minute. The only change from Flink's code is the
clock: the timer is an event-time timer at the small transaction's event time plus a minute (Flink's walkthrough
uses processing time, which a job reading a backlog cannot reproduce), and an alert carries the large transaction's
event time (`ts`) beside the account (`id`).

Input (`transactions`, JSON): `{"account_id": long, "amount": double, "ts": epoch ms}`, event time `ts`, at most
`OUT_OF_ORDER_MS` out of order. The answer matches Flink's on a backlog and live because the operator fires a key's
event-time timers between its transactions, in event-time order, as a watermark advancing with the stream would
(`docs/operators-keyed.md`, "Order within an epoch").
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from ethereal_kafka.api import (
    KeyedContext,
    KeyedProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
    Time,
    ValueStateDescriptor,
    WatermarkStrategy,
)

SMALL_AMOUNT = 1.00
LARGE_AMOUNT = 500.00
ONE_MINUTE = 60 * 1000
OUT_OF_ORDER_MS = 5_000
TRANSACTION_DDL = "account_id long, amount double, ts long"
ALERT_DDL = "id long, ts long"


class FraudDetector(KeyedProcessFunction):
    """Flink's walkthrough `FraudDetector`, with an event-time timer (see the module docstring)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.flag_state = runtime_context.get_state(ValueStateDescriptor("flag"))
        self.timer_state = runtime_context.get_state(ValueStateDescriptor("timer-state"))

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        last_transaction_was_small = self.flag_state.value()
        if last_transaction_was_small is not None:
            if value["amount"] > LARGE_AMOUNT:
                yield {"id": ctx.get_current_key(), "ts": ctx.timestamp()}
            self._clean_up(ctx)
        if value["amount"] < SMALL_AMOUNT:
            self.flag_state.update(True)
            timestamp = ctx.timestamp()
            assert timestamp is not None  # the stream is watermarked: every element has an event time
            timer = timestamp + ONE_MINUTE
            ctx.timer_service().register_event_time_timer(timer)
            self.timer_state.update(timer)

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> None:
        self.timer_state.clear()
        self.flag_state.clear()

    def _clean_up(self, ctx: KeyedContext) -> None:
        timer = self.timer_state.value()
        ctx.timer_service().delete_event_time_timer(timer)
        self.timer_state.clear()
        self.flag_state.clear()


def build(env: StreamExecutionEnvironment) -> None:
    """The job's pipeline: `transactions` → `FraudDetector` per account → `alerts`."""
    (
        env.from_source("transactions")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(
                Time.milliseconds(OUT_OF_ORDER_MS)
            ).with_timestamp_assigner("ts")
        )
        .key_by("account_id")
        .process(FraudDetector(), output_type=ALERT_DDL)
        .name("fraud-detector")
        .uid("fraud-detector")
        .sink_to("alerts")
    )


# -- demo input ----------------------------------------------------------------------------------------------------
#: Event time between consecutive transactions, and how far each one is moved at random (less than the bound).
STEP_MS = 1_000
JITTER_MS = 2_000
#: Around a pending timer T, an account's next transaction is kept out of `[T - 1 s, T + 12 s]`: there, whether the
#: timer fires before it depends on how the stream around it arrives (in Flink too), and on where epochs split.
_UNSURE = (-1_000, OUT_OF_ORDER_MS + 2 * JITTER_MS + STEP_MS + 1_000)


def transactions(
    count: int, accounts: int = 5, seed: int = 24, start_ms: int = 1_700_000_000_000
) -> list[dict[str, Any]]:
    """Demo input in stream order: `count` transactions ~`STEP_MS` apart over `accounts` accounts (ids 1..), each
    moved by up to `JITTER_MS` (out of order across accounts, within the bound; an account's own transactions are in
    event-time order, as Flink would process them in arrival order and the framework in event-time order).

    After a small transaction an account either goes on at once (its next transaction, often large, comes within
    the minute: an alert when large) or goes quiet for over a minute and then spends big (no alert: the timer
    cleared the flag). No account's transaction lies where the answer would depend on arrival order (`_UNSURE`),
    so Flink's answer is well defined and, read from one partition, the same on any split into epochs. Account 0
    stands in when no other account may transact; it never makes small transactions.
    """
    rng = random.Random(seed)
    timer: dict[int, int] = {}  # pending timer per account
    quiet: dict[int, int] = {}  # an account that went quiet makes no transaction before this time
    latest: dict[int, int] = {}  # each account's latest event time
    out = []
    for i in range(count):
        ts = start_ms + i * STEP_MS + rng.randint(-JITTER_MS, JITTER_MS)
        allowed = [
            a
            for a in range(1, accounts + 1)
            if quiet.get(a, ts) <= ts
            and not (a in timer and timer[a] + _UNSURE[0] <= ts <= timer[a] + _UNSURE[1])
        ]
        account = rng.choice(allowed) if allowed else 0
        # Keep an account's own transactions in event-time order (the jitter only reorders different accounts).
        ts = max(ts, latest.get(account, ts - 1) + 1)
        latest[account] = ts
        flagged = account in timer and ts < timer[account]
        roll = rng.random()
        if account == 0:
            amount = round(rng.uniform(2, 400), 2)
        elif flagged or account in quiet:
            amount = round(rng.uniform(501, 3000), 2) if roll < 0.7 else round(rng.uniform(2, 400), 2)
        elif roll < 0.1:
            amount = round(rng.uniform(0.01, 0.99), 2)
        else:
            amount = round(rng.uniform(2, 400), 2)
        timer.pop(account, None)
        quiet.pop(account, None)
        if amount < SMALL_AMOUNT:
            timer[account] = ts + ONE_MINUTE
            if rng.random() < 0.5:
                quiet[account] = ts + ONE_MINUTE + _UNSURE[1] + 1_000
        out.append({"account_id": account, "amount": amount, "ts": ts})
    return out
