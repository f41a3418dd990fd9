"""DataStream pipelines of the connected-streams tests, importable by the job subprocess and its Python workers.
Their plain-Python references live in `ref_connected`.

Inputs: `events` (`{"id", "user", "amount", "ts"}`) and `limits` (`{"id", "user", "limit", "ts"}`, JSON), event
time from `ts` with a 3 s out-of-orderness bound, both keyed by `user`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ethereal_kafka.api import (
    CoMapFunction,
    CoProcessFunction,
    KeyedContext,
    KeyedCoProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from ethereal_kafka.examples.fraud_rules import ALERT_DDL, RULES, RuleDetector

BOUND_MS = 3_000
EVENT_DDL = "id long, user string, amount long, ts long"
LIMIT_DDL = "id long, user string, limit long, ts long"
OUT_DDL = "user string, id long, amount long, lim long, verdict string, n long"


class LimitCheck(KeyedCoProcessFunction):
    """Per user: a limit (input 2 sets it; 0 removes it) and the number of events seen; each event (input 1) is
    `over` its user's limit or `ok`. Every element emits one record, carrying the running count: the output shows the
    order in which the two inputs met."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.limit = runtime_context.get_state(ValueStateDescriptor("limit"))
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def process_element1(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        n = (self.seen.value() or 0) + 1
        self.seen.update(n)
        limit = self.limit.value()
        verdict = "over" if limit is not None and value["amount"] > limit else "ok"
        yield {
            "user": value["user"],
            "id": value["id"],
            "amount": value["amount"],
            "lim": limit,
            "verdict": verdict,
            "n": n,
        }

    def process_element2(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        if value["limit"] == 0:
            self.limit.clear()
            verdict = "clear"
        else:
            self.limit.update(value["limit"])
            verdict = "set"
        lim = value["limit"] or None
        yield {
            "user": value["user"],
            "id": value["id"],
            "amount": None,
            "lim": lim,
            "verdict": verdict,
            "n": self.seen.value() or 0,
        }


@dataclass(frozen=True)
class Names:
    """The source and sink names a pipeline of this module uses (a job running it beside other pipelines, as the
    shared kill run does, renames them apart)."""

    events: str = "events"
    limits: str = "limits"
    out: str = "out"
    alerts: str = "alerts"


def _streams(env: StreamExecutionEnvironment, names: Names) -> tuple[Any, Any]:
    def watermarked(name: str) -> Any:
        return env.from_source(name).assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS).with_timestamp_assigner("ts")
        )

    return watermarked(names.events), watermarked(names.limits)


def limit_check(env: StreamExecutionEnvironment) -> None:
    """`LimitCheck` over events and limits connected by user (a job's pipeline takes the environment only)."""
    check_limits(env, Names())


def limit_check_reordered(env: StreamExecutionEnvironment) -> None:
    """`limit_check` as a next version might build it: the limits' watermark first, and a step added before the
    events' one. Each watermark's node id changes, their sources and timestamps do not."""
    limits = env.from_source("limits").assign_timestamps_and_watermarks(_bounded("ts"))
    events = env.from_source("events").filter(lambda e: True).assign_timestamps_and_watermarks(_bounded("ts"))
    checked = events.key_by("user").connect(limits.key_by("user")).process(LimitCheck(), output_type=OUT_DDL)
    checked.name("limit-check").sink_to("out")


def limit_check_limits_by_id(env: StreamExecutionEnvironment) -> None:
    """`limit_check` whose limits take their event time from another field, without a uid: the event time the
    checkpoint carries for the limits is not theirs any more."""
    limits = env.from_source("limits").assign_timestamps_and_watermarks(_bounded("id"))
    events = env.from_source("events").assign_timestamps_and_watermarks(_bounded("ts"))
    events.key_by("user").connect(limits.key_by("user")).process(LimitCheck(), output_type=OUT_DDL).sink_to(
        "out"
    )


def _bounded(field: str) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS).with_timestamp_assigner(field)


def check_limits(env: StreamExecutionEnvironment, names: Names) -> None:
    """`LimitCheck` over `names.events` and `names.limits` connected by user, to `names.out`."""
    events, limits = _streams(env, names)
    checked = events.key_by("user").connect(limits.key_by("user")).process(LimitCheck(), output_type=OUT_DDL)
    checked.name("limit-check").sink_to(names.out)


#: Limit records as the example's rules: rule `r<user>`, kind `total` (threshold x 20) for every 7th id, `reset`
#: for every 11th, else `amount`; a zero limit removes the rule.
RULE_COLUMNS = (
    "concat('r', user) AS rule",
    "CASE WHEN id % 11 = 10 THEN 'reset' WHEN id % 7 = 6 THEN 'total' ELSE 'amount' END AS kind",
    "CASE WHEN `limit` = 0 THEN NULL WHEN id % 7 = 6 THEN CAST(`limit` * 20 AS DOUBLE) "
    "ELSE CAST(`limit` AS DOUBLE) END AS threshold",
    "ts",
)


#: How long after a transaction `FollowedRuleDetector`'s follow-up timer fires (event time).
FOLLOW_UP_MS = 2_000


class FollowedRuleDetector(RuleDetector):
    """The example's `RuleDetector`, plus a follow-up per transaction: an event-time timer `FOLLOW_UP_MS` after it
    whose `on_timer` reports the card's running total and the number of active rules as they are when it fires
    (rule `follow-up`, kind `timer`, `threshold` the rule count, `value` the total, `ts` the timer's time)."""

    def process_element(self, value: dict[str, Any], ctx: Any) -> Iterator[dict[str, Any]]:
        yield from super().process_element(value, ctx)
        ctx.timer_service().register_event_time_timer(value["ts"] + FOLLOW_UP_MS)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[dict[str, Any]]:
        yield {
            "card": ctx.get_current_key(),
            "tx_id": None,
            "rule": "follow-up",
            "kind": "timer",
            "threshold": float(len(list(ctx.get_broadcast_state(RULES).items()))),
            "value": round(self.total.value() or 0.0, 2),
            "ts": timestamp,
        }


def limits_and(env: StreamExecutionEnvironment, detector: RuleDetector, names: Names = Names()) -> None:
    """Two queries over the same inputs: `LimitCheck` to `names.out`, and `detector` with the limits broadcast as
    rules to `names.alerts`."""
    check_limits(env, names)
    events, limits = _streams(env, names)
    transactions = events.select("id AS tx_id", "user AS card", "CAST(amount AS DOUBLE) AS amount", "ts")
    rules = limits.select(*RULE_COLUMNS).broadcast(RULES)
    alerts = transactions.key_by("card").connect(rules).process(detector, output_type=ALERT_DDL)
    alerts.name("rule-detector").sink_to(names.alerts)


def limits_and_rules(env: StreamExecutionEnvironment) -> None:
    """Two queries over the same inputs: `LimitCheck` (connected keyed streams) to `out`, and the fraud-rules
    example's `RuleDetector` (broadcast state), with the limits as rules, to `alerts`."""
    limits_and(env, RuleDetector())


def limits_and_timed_rules(env: StreamExecutionEnvironment) -> None:
    """`limits_and_rules` with `FollowedRuleDetector` (broadcast state and timers) to `alerts`."""
    limits_and(env, FollowedRuleDetector())


class Tagged(CoMapFunction):
    """Both inputs as one stream of `(user, what)`."""

    def map1(self, value: dict[str, Any]) -> dict[str, Any]:
        return {"user": value["user"], "what": f"event {value['id']}"}

    def map2(self, value: dict[str, Any]) -> dict[str, Any]:
        return {"user": value["user"], "what": f"limit {value['limit']}"}


class TaggedProcess(CoProcessFunction):
    """`Tagged` as a non-keyed `CoProcessFunction`, saying what its context holds (no key, the element's time)."""

    def process_element1(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        yield {
            "user": value["user"],
            "what": f"event {value['id']} key {ctx.get_current_key()} at {ctx.timestamp()}",
        }

    def process_element2(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        yield {"user": value["user"], "what": f"limit {value['limit']} at {ctx.timestamp()}"}


def co_map(env: StreamExecutionEnvironment) -> None:
    """`Tagged` over the two inputs connected (not keyed) to `out`, and `TaggedProcess` over them to `alerts`."""
    events, limits = env.from_source("events"), env.from_source("limits")
    events.connect(limits).map(Tagged(), output_type="user string, what string").sink_to("out")
    events.connect(limits).process(TaggedProcess(), output_type="user string, what string").sink_to("alerts")
