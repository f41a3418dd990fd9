"""Orders joined with shipments: per shipped order, the shipment latency (shipment time - order time).

    ethereal-kafka run connectors/examples/orders-job.properties

Inputs (JSON): `orders` `{"order_id": long, "customer": string, "amount": double, "ts": epoch ms}` and `shipments`
`{"shipment_id": long, "order_id": long, "carrier": string, "ts": epoch ms}`, both with event time `ts` and up to
10 s of out-of-orderness. An order and its shipment are paired when they fall into the same 5-minute tumbling
event-time window (the seed's `.window(TumblingWindow.of(Time.minutes(5)))`): a windowed inner join, which runs on
Spark's native stream-stream join (see docs/operators-joins.md). An order shipped in a later window is not paired
(a window join's semantics; an interval join, `between(0, max latency)`, pairs across window bounds). Output
(`latencies`, JSON keyed by order id): `{order_id, customer, carrier, order_ts, shipment_ts, latency_ms}`.
"""

from __future__ import annotations

import random
from typing import Any

from ethereal_kafka.api import StreamExecutionEnvironment, Time, TumblingEventTimeWindows, WatermarkStrategy

ORDER_DDL = "order_id long, customer string, amount double, ts long"
SHIPMENT_DDL = "shipment_id long, order_id long, carrier string, ts long"
LATENCY_DDL = (
    "order_id long, customer string, carrier string, order_ts long, shipment_ts long, latency_ms long"
)
WINDOW = Time.minutes(5)
OUT_OF_ORDER_MS = 10_000


def latency(order: dict[str, Any], shipment: dict[str, Any]) -> dict[str, Any]:
    """One joined pair: the order, its shipment, and the time between them."""
    return {
        "order_id": order["order_id"],
        "customer": order["customer"],
        "carrier": shipment["carrier"],
        "order_ts": order["ts"],
        "shipment_ts": shipment["ts"],
        "latency_ms": shipment["ts"] - order["ts"],
    }


def build(env: StreamExecutionEnvironment) -> None:
    """The job's pipeline: `orders` ⋈ `shipments` on order id in 5-minute windows → `latencies`."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(OUT_OF_ORDER_MS).with_timestamp_assigner("ts")
    orders = (
        env.from_source("orders")
        .select("order_id", "customer", "amount", "ts")
        .assign_timestamps_and_watermarks(strategy)
    )
    shipments = (
        env.from_source("shipments")
        .select("shipment_id", "order_id", "carrier", "ts")
        .assign_timestamps_and_watermarks(strategy)
    )
    (
        orders.join(shipments)
        .where("order_id")
        .equal_to("order_id")
        .window(TumblingEventTimeWindows.of(WINDOW))
        .apply(latency, output_type=LATENCY_DDL)
        .sink_to("latencies")
    )


def orders_and_shipments(
    count: int, seed: int = 3, start_ms: int = 1_700_000_000_000
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Demo input: `count` orders ~4 s apart; 90% are shipped 20 s to 4 min later (some in the next window), the
    rest never; both streams slightly out of order."""
    rng = random.Random(seed)
    orders: list[dict[str, Any]] = []
    shipments: list[dict[str, Any]] = []
    for i in range(count):
        ts = start_ms + i * 4_000 + rng.randint(-OUT_OF_ORDER_MS // 2, OUT_OF_ORDER_MS // 2)
        orders.append(
            {"order_id": i, "customer": f"cust-{rng.randint(1, 25)}", "amount": rng.randint(5, 900), "ts": ts}
        )
        if rng.random() < 0.9:
            shipped = ts + rng.randint(20_000, 240_000)
            carrier = rng.choice(("ups", "dhl", "fedex"))
            shipments.append({"shipment_id": 10_000 + i, "order_id": i, "carrier": carrier, "ts": shipped})
    shipments.sort(key=lambda s: int(s["ts"]) + rng.randint(-OUT_OF_ORDER_MS // 2, OUT_OF_ORDER_MS // 2))
    return orders, shipments
