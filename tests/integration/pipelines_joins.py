"""DataStream pipelines of the join tests (importable by the job subprocess and its Python workers)."""

from __future__ import annotations

import os
from typing import Any

from ethereal_kafka.api import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    WatermarkStrategy,
    WindowAssigner,
)

#: Windowed join tests: tumbling windows of this size, sliding windows of twice it every WINDOW_MS.
WINDOW_MS = 4_000
#: Session gap of the session-window join.
GAP_MS = 150
#: Out-of-orderness bound of both join inputs.
BOUND_MS = 1_500
#: Interval join bounds: right.ts in [left.ts + LOWER_MS, left.ts + UPPER_MS].
LOWER_MS, UPPER_MS = -1_000, 2_000

#: Set to an order id to make the lookup pipeline fail on that order (simulates a crash mid-epoch).
FAIL_AT_ENV = "ETHEREAL_TEST_FAIL_AT"


def _fail_at(element: dict[str, Any]) -> dict[str, Any]:
    if os.environ.get(FAIL_AT_ENV) == str(element["order_id"]):
        raise RuntimeError(f"test failure at order {element['order_id']}")
    return element


def lookup(env: StreamExecutionEnvironment) -> None:
    """Orders enriched with the `customers` table: left join into `left`, inner join into `inner`."""
    orders = env.from_source("orders").select("order_id", "customer", "amount").map(_fail_at)
    orders.join_table("customers", "customer", how="left", prefix="c_").sink_to("left")
    orders.join_table("customers", lambda e: e["customer"], how="inner").sink_to("inner")


def _events(env: StreamExecutionEnvironment, name: str) -> Any:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(BOUND_MS).with_timestamp_assigner("ts")
    return env.from_source(name).select("k", "id", "ts").assign_timestamps_and_watermarks(strategy)


def _pair(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "lid": left["id"] if left is not None else None,
        "rid": right["id"] if right is not None else None,
        "k": (left or right or {}).get("k"),
    }


def _join(env: StreamExecutionEnvironment, how: str, windows: str, function: bool, sink: str) -> None:
    assigner: WindowAssigner = {
        "tumbling": TumblingEventTimeWindows.of(WINDOW_MS),
        "sliding": SlidingEventTimeWindows.of(2 * WINDOW_MS, WINDOW_MS),
        "session": EventTimeSessionWindows.with_gap(GAP_MS),
    }[windows]
    joined = _events(env, "left").join(_events(env, "right"), how).where("k").equal_to("k").window(assigner)
    if function:
        joined.apply(_pair, "lid string, rid string, k string").sink_to(sink)
    else:
        joined.apply().sink_to(sink)


#: The windowed joins of the tests: sink name -> (kind, windows, with a join function).
WINDOWED = {
    "inner": ("inner", "tumbling", False),
    "left_sliding": ("left", "sliding", False),
    "right_fn": ("right", "tumbling", True),
    "full": ("full", "tumbling", False),
    "semi_sliding": ("semi", "sliding", False),
    "anti": ("anti", "tumbling", False),
    "anti_sliding": ("anti", "sliding", False),
    "full_session": ("full", "session", False),
}
#: The windowed joins run by each job (one query each).
GROUPS = {
    "outer": ("inner", "left_sliding", "right_fn", "full"),
    "filtering": ("semi_sliding", "anti", "anti_sliding", "full_session"),
}


def outer(env: StreamExecutionEnvironment) -> None:
    """Inner, left (sliding), right (with a function) and full outer joins of `left` and `right` on `k`."""
    for sink in GROUPS["outer"]:
        _join(env, *WINDOWED[sink], sink)


def filtering(env: StreamExecutionEnvironment) -> None:
    """Semi (sliding), anti (tumbling, sliding) and full outer (session windows) joins of `left` and `right`."""
    for sink in GROUPS["filtering"]:
        _join(env, *WINDOWED[sink], sink)


def interval(env: StreamExecutionEnvironment) -> None:
    """`left` and `right` keyed by `k`, joined when right.ts is in [left.ts - 1 s, left.ts + 2 s]."""
    left = _events(env, "left").key_by("k")
    right = _events(env, "right").key_by("k")
    left.interval_join(right).between(LOWER_MS, UPPER_MS).process().sink_to("interval")
