"""The operators behind connected streams and broadcast state, fed epoch by epoch the way Spark feeds them (over
the in-memory state server), agree with the plain-Python references the integration tests hold them to
(`tests/integration/ref_connected`) — with any epoch split, any row order within an epoch, and the rows of a
bucket mixing keys. (The integration tests then add Spark, Kafka, restarts and kills.)"""

from __future__ import annotations

import datetime
import itertools
import random
import zlib
from collections import defaultdict
from typing import Any

import pytest
from pyspark.sql import Row

from ethereal_kafka.examples.fraud_rules import ALERT_DDL, RuleDetector
from ethereal_kafka.plan.conform import ElementType
from ethereal_kafka.plan.operators.base import OutputLayout
from ethereal_kafka.plan.operators.broadcast import BroadcastProcessor, BroadcastSpec
from ethereal_kafka.plan.operators.coprocess import CoKeyedProcessor
from ethereal_kafka.plan.operators.process import ProcessSpec
from ethereal_kafka.plan.schema import arrow_struct
from tests.integration import ref_connected as ref
from tests.integration.connected_jobs import BOUND_MS, OUT_DDL, FollowedRuleDetector, LimitCheck
from tests.unit.plan.fake_spark_state import FakeHandle, FakeStore, run_epoch

BUCKETS = 4


def _stamp(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _epochs(records: list[ref.Record], cuts: list[int]) -> list[list[ref.Record]]:
    """Records split by offset at `cuts` (the same offsets in every partition), one list per epoch."""
    bounds = [0, *cuts, 10**9]
    return [[r for r in records if lo <= r.offset < hi] for lo, hi in itertools.pairwise(bounds)]


def _layout(ddl: str) -> OutputLayout:
    user = arrow_struct(ddl, "test")
    return OutputLayout(tuple(f.name for f in user), main_type=ElementType.of(user, "test", "output"))


def _row(index: int, record: ref.Record, value: dict[str, Any], key: Any, **extra: Any) -> Row:
    elements = (
        {"__in1": Row(**value), "__in2": None} if index == 1 else {"__in1": None, "__in2": Row(**value)}
    )
    return Row(
        __input=index,
        **elements,
        __part=record.partition,
        __off=record.offset,
        __ts=_stamp(record.ts),
        __key=key,
        **extra,
    )


def _per_key(records: list[dict[str, Any]], field: str) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        out[record[field]].append(record)
    return dict(out)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_co_process_operator_gives_the_reference_output(seed: int) -> None:
    events, limits = ref.make_inputs(seed, events=200, limits=30, users=4, start=1_000_000)
    cuts = sorted(random.Random(seed).sample(range(1, 100), 3))
    split_events, split_limits = _epochs(events, cuts), _epochs(limits, [c // 4 for c in cuts])
    layout = _layout(OUT_DDL)
    spec = ProcessSpec(
        "coprocess#1", LimitCheck(), "event", True, ("user",), layout, (*layout.fields, "__ts", "__key")
    )
    store = FakeStore()
    processor = CoKeyedProcessor(spec)
    processor.init(FakeHandle(store))
    got = []
    rng = random.Random(seed)
    for number, (epoch_events, epoch_limits) in enumerate(zip(split_events, split_limits, strict=True)):
        rows = [_row(1, r, r.value, r.user) for r in epoch_events] + [
            _row(2, r, r.value, r.user) for r in epoch_limits
        ]
        rng.shuffle(rows)
        got += run_epoch(processor, store, rows, 0, number)
    fields = layout.fields
    mine = [{f: r[f] for f in fields} for r in got]
    assert _per_key(mine, "user") == _per_key(ref.limit_check(split_events, split_limits), "user")


@pytest.mark.parametrize(("seed", "timed"), [(1, False), (2, False), (1, True), (2, True)])
def test_the_broadcast_operator_gives_the_reference_alerts(seed: int, timed: bool) -> None:
    """`timed`: `FollowedRuleDetector`'s follow-up timers too, with each epoch's watermark the largest event time
    of the epochs before it minus the bound (Spark's), and a last, empty epoch whose watermark passes them all."""
    events, limits = ref.make_inputs(seed, events=200, limits=40, users=5, start=1_000_000)
    cuts = sorted(random.Random(seed).sample(range(1, 100), 3))
    split_events, split_limits = _epochs(events, cuts), _epochs(limits, [c // 3 for c in cuts])
    marks = [0]
    for epoch_events in split_events:
        marks.append(max([marks[-1], *(r.ts - BOUND_MS for r in epoch_events)]))
    if timed:
        split_events, split_limits = [*split_events, []], [*split_limits, []]
        marks[-1] = 10**13
    layout = _layout(ALERT_DDL)
    function = FollowedRuleDetector() if timed else RuleDetector()
    spec = BroadcastSpec(
        "broadcast#1",
        function,
        True,
        ("rules",),
        ("card",),
        layout,
        (*layout.fields, "__ts", "__key"),
        mode="event" if timed else None,
        event_time=True,
    )
    store = FakeStore()
    processor = BroadcastProcessor(spec)
    processor.init(FakeHandle(store))
    got = []
    rng = random.Random(seed)
    for number, (epoch_events, epoch_limits) in enumerate(zip(split_events, split_limits, strict=True)):
        rows = []
        for r in epoch_events:
            tx = {"tx_id": r.id, "card": r.user, "amount": float(r.amount or 0), "ts": r.ts}
            rows.append(_row(1, r, tx, zlib.crc32(r.user.encode()) % BUCKETS, __ukey=r.user))
        for r in epoch_limits:
            name, kind, threshold = ref.as_rule(r)
            rule = {"rule": name, "kind": kind, "threshold": threshold, "ts": r.ts}
            rows += [_row(2, r, rule, bucket, __ukey=None) for bucket in range(BUCKETS)]
        rng.shuffle(rows)
        got += run_epoch(processor, store, rows, marks[number] if timed else 0, number)
    mine = [{f: r[f] for f in layout.fields} for r in got]
    expected = ref.timed_rule_alerts(split_events, split_limits, marks if timed else None)
    assert len(expected) > 50
    assert sum(r["kind"] == "timer" for r in expected) == (len(events) if timed else 0)
    assert _per_key(mine, "card") == _per_key(expected, "card")
