"""Fraud rules that change while the job runs: transactions checked per card against rules arriving on a `rules`
topic, with broadcast state (Flink's "dynamic rules" pattern).

    ethereal-kafka run connectors/examples/fraud-rules-job.properties

Inputs (JSON, event time `ts` with 5 s of out-of-orderness):

- `transactions`: `{"tx_id": long, "card": string, "amount": double, "ts": epoch ms}`, keyed by card;
- `rules`: `{"rule": string, "kind": string, "threshold": double, "ts": epoch ms}`, broadcast to every instance.
  A record adds the rule `rule` or changes it (same name), or removes it (`threshold` null). Kinds: `amount` (a
  transaction above `threshold`), `total` (a card's running total above `threshold`), and `reset` (clears every
  card's running total: `apply_to_keyed_state`).

Per card, `RuleDetector` keeps the card's running total (keyed state) and checks each transaction against every
rule in the broadcast state (read-only there); each violated rule gives one alert (`alerts`). A rule decides from
the next transaction on: within an epoch, transactions and rule changes meet in event-time order (a transaction
before a rule change of the same millisecond), then by offset — the same on every replay, so the alerts are exactly
once even across crashes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ethereal_kafka.api import (
    BroadcastContext,
    KeyedBroadcastProcessFunction,
    MapStateDescriptor,
    ReadOnlyBroadcastContext,
    RuntimeContext,
    StreamExecutionEnvironment,
    Time,
    ValueStateDescriptor,
    WatermarkStrategy,
)

OUT_OF_ORDER_MS = 5_000
TRANSACTION_DDL = "tx_id long, card string, amount double, ts long"
RULE_DDL = "rule string, kind string, threshold double, ts long"
ALERT_DDL = "card string, tx_id long, rule string, kind string, threshold double, value double, ts long"
#: The broadcast state: rule name -> {"kind", "threshold"}.
RULES = MapStateDescriptor("rules")
TOTAL = ValueStateDescriptor("total")


class RuleDetector(KeyedBroadcastProcessFunction):
    """Each transaction against every active rule (see the module docstring)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(TOTAL)

    def process_element(
        self, value: dict[str, Any], ctx: ReadOnlyBroadcastContext
    ) -> Iterator[dict[str, Any]]:
        amount = value["amount"] or 0.0
        total = (self.total.value() or 0.0) + amount
        self.total.update(total)
        for name, rule in ctx.get_broadcast_state(RULES).items():
            seen = amount if rule["kind"] == "amount" else total
            if seen > rule["threshold"]:
                yield {
                    "card": ctx.get_current_key(),
                    "tx_id": value["tx_id"],
                    "rule": name,
                    "kind": rule["kind"],
                    "threshold": rule["threshold"],
                    "value": round(seen, 2),
                    "ts": value["ts"],
                }

    def process_broadcast_element(self, value: dict[str, Any], ctx: BroadcastContext) -> None:
        if value["kind"] == "reset":
            ctx.apply_to_keyed_state(TOTAL, lambda card, state: state.clear())
            return
        rules = ctx.get_broadcast_state(RULES)
        if value["threshold"] is None:
            rules.remove(value["rule"])
        else:
            rules.put(value["rule"], {"kind": value["kind"], "threshold": value["threshold"]})


def build(env: StreamExecutionEnvironment) -> None:
    """The job's pipeline: `transactions` per card, connected with the broadcast `rules` → `alerts`."""

    def timed() -> WatermarkStrategy:
        return WatermarkStrategy.for_bounded_out_of_orderness(
            Time.milliseconds(OUT_OF_ORDER_MS)
        ).with_timestamp_assigner("ts")

    transactions = env.from_source("transactions").select("tx_id", "card", "amount", "ts")
    rules = env.from_source("rules").select("rule", "kind", "threshold", "ts")
    alerts = (
        transactions.assign_timestamps_and_watermarks(timed())
        .key_by("card")
        .connect(rules.assign_timestamps_and_watermarks(timed()).broadcast(RULES))
        .process(RuleDetector(), output_type=ALERT_DDL)
        .name("rule-detector")
    )
    alerts.sink_to("alerts")
