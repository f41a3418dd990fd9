"""Versions of one stateful DataStream job for `test_evolution.py` (`validate --against APP`): a running total per
user with the uid `totals`, and what a next version might do to it."""

from __future__ import annotations

from typing import Any

from ethereal_kafka.api import KeyedStream, StreamExecutionEnvironment
from tests.integration.keyed_jobs import _keyed

OUT_DDL = "user string, amount long"


def _out(e: dict[str, Any]) -> dict[str, Any]:
    return {"user": e["user"], "amount": e["amount"]}


def _totals(env: StreamExecutionEnvironment) -> KeyedStream:
    return _keyed(env)


def v1(env: StreamExecutionEnvironment) -> None:
    """The running job: the total amount per user."""
    _totals(env).sum("amount").uid("totals").map(_out, OUT_DDL).sink_to("out")


def v2_more_logic(env: StreamExecutionEnvironment) -> None:
    """A new version with a stateless step added before and after the total: its state carries over."""
    keyed = _keyed(env).filter(lambda e: e["amount"] >= 0).key_by("user")
    keyed.sum("amount").uid("totals").map(_out, OUT_DDL).filter(lambda e: True).sink_to("out")


def v3_total_dropped(env: StreamExecutionEnvironment) -> None:
    """A new version without the total: its state would be lost."""
    _keyed(env).map(_out, OUT_DDL).sink_to("out")


def v4_total_changed(env: StreamExecutionEnvironment) -> None:
    """A new version whose `totals` keeps a largest element instead of a sum: the old state cannot be read."""
    _keyed(env).reduce(lambda a, b: a if a["amount"] >= b["amount"] else b).uid("totals").map(
        _out, OUT_DDL
    ).sink_to("out")


def v6_second_state(env: StreamExecutionEnvironment) -> None:
    """A new version that adds a second stateful operator (the largest total so far) after `totals`, in its
    query."""
    totals = _keyed(env).sum("amount").uid("totals").map(_out, OUT_DDL)
    totals.key_by("user").reduce(lambda a, b: a if a["amount"] >= b["amount"] else b).uid("largest").sink_to(
        "out"
    )
