"""Pipelines of `test_user_errors` (issue 24, item 7): named operators whose user code raises on some elements, with
their plain-Python references. Input: `ethereal_kafka.examples.eos.events` (JSON `{"id", "key", "seq", "amount",
"ts"}`, key `k<n>` in one partition per key).

`share(e)` raises `ZeroDivisionError` for an amount divisible by `BAD_AMOUNT`; `RunningShare` raises `ValueError` on
a key's element whose seq divides by `BAD_SEQ`. `flaky(e)` raises once per run, on the first element any worker
sees (a marker file named by `FLAKY_MARKER_ENV` says it did).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from ethereal_kafka.api import (
    KeyedContext,
    KeyedProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)

BAD_AMOUNT = 17
BAD_SEQ = 11
FLAKY_MARKER_ENV = "TEST_FLAKY_MARKER"
#: The events' value fields besides `key`, which the source takes from the record key (`key.format=string`).
VALUE_DDL = "id bigint, seq bigint, amount bigint, ts bigint"
SHARE_DDL = "id bigint, key string, seq bigint, share bigint"
TOTAL_DDL = "key string, seq bigint, total bigint"


def share(e: dict[str, Any]) -> dict[str, Any]:
    """100 divided by the amount's remainder modulo `BAD_AMOUNT` (raises when it is 0)."""
    return {"id": e["id"], "key": e["key"], "seq": e["seq"], "share": 100 // (e["amount"] % BAD_AMOUNT)}


class RunningShare(KeyedProcessFunction):
    """Per key, the running total of `share`; raises on an element whose seq divides by `BAD_SEQ`."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value: dict[str, Any], ctx: KeyedContext) -> Iterator[dict[str, Any]]:
        if value["seq"] % BAD_SEQ == 0:
            raise ValueError(f"seq {value['seq']} is unlucky")
        total = (self.total.value() or 0) + value["share"]
        self.total.update(total)
        yield {"key": value["key"], "seq": value["seq"], "total": total}


def partition_preserving(env: StreamExecutionEnvironment) -> None:
    """events → share (named) → out: one partition-preserving query."""
    (env.from_source("events").map(share, output_type=SHARE_DDL).name("share").uid("share-1").sink_to("out"))


def shuffling(env: StreamExecutionEnvironment) -> None:
    """events → share → key_by(key) → RunningShare → out: a shuffling query whose map (before the shuffle) and
    process function (after it) both raise on some elements."""
    (
        env.from_source("events")
        .map(share, output_type=SHARE_DDL)
        .name("share")
        .uid("share-1")
        .key_by("key")
        .process(RunningShare(), output_type=TOTAL_DDL)
        .name("running share")
        .uid("running-share-1")
        .sink_to("out")
    )


def flaky(e: dict[str, Any]) -> dict[str, Any]:
    """The element as it is; raises once per run (see the module docstring)."""
    marker = os.environ.get(FLAKY_MARKER_ENV)
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return e
        raise ConnectionError("the lookup service hung up (once)")
    return e


def flaky_once(env: StreamExecutionEnvironment) -> None:
    """events → flaky (named) → out."""
    env.from_source("events").map(flaky).name("enrich").uid("enrich-1").sink_to("out")


# -- references ----------------------------------------------------------------------------------------------------
def events_of(inputs: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    """The input events, in production order."""
    return [json.loads(value) for _, value in inputs]


def bad_share(e: dict[str, Any]) -> bool:
    """True when `share` raises on `e`."""
    return e["amount"] % BAD_AMOUNT == 0


def shares_reference(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `partition_preserving` writes: `share` of every event it does not raise on."""
    return [share(e) for e in events if not bad_share(e)]


def totals_reference(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What `shuffling` writes (per key in seq order), and the shares `RunningShare` raises on."""
    totals: dict[str, int] = defaultdict(int)
    out, unlucky = [], []
    for e in events:
        if bad_share(e):
            continue
        s = share(e)
        if s["seq"] % BAD_SEQ == 0:
            unlucky.append(s)
            continue
        totals[s["key"]] += s["share"]
        out.append({"key": s["key"], "seq": s["seq"], "total": totals[s["key"]]})
    return out, unlucky
