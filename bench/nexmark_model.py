"""Nexmark's event stream for bench/nexmark.py, and each query's answer computed in plain Python.

The generator follows Nexmark's model (the Beam/Flink Nexmark generator's proportions and fields; its code is not
copied): event `n` is a person when `n % 50 == 0`, an auction when `n % 50` is 1-3, else a bid (1 : 3 : 46), and its
event time is `base_ms + n * 1000 // rate` (`rate` events per second of event time). Persons and auctions get
increasing ids from 1000; an auction's seller is the newest person half of the time, else one of the 20 newest; a
bid's auction is a "hot" one (the newest auction rounded down to a multiple of 10) half of the time, else one of the
100 newest; its bidder is the newest person half of the time, else one of the 1,000 newest; prices are log-uniform
in [100, 1,000,000). Every random draw comes from one `random.Random(seed)`, so a seed gives the same events.

The answers (`answer(query, events)`) are what the query computes once its input has been read and the watermark
reached (the largest event time of each input minus `OUT_OF_ORDER_MS`, the smallest over the inputs): window results
only for windows ending at or before that watermark — a streaming engine that has not seen the end of its input
holds the later windows open — and, for the join of q8, every match (pairs are emitted as soon as both sides have
arrived). Each answer is a multiset of tuples, the same shape `row(query, record)` gives an output record.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: The queries, in the order the bench runs them, and the event kinds (topics) each one reads.
QUERIES: dict[str, tuple[str, ...]] = {
    "q0": ("bids",),
    "q1": ("bids",),
    "q2": ("bids",),
    "q5": ("bids",),
    "q7": ("bids",),
    "q8": ("persons", "auctions"),
}
KINDS = ("persons", "auctions", "bids")
#: Each event kind's fields (Nexmark's, snake_case) as Spark DDL: the source files' `value.schema`.
SCHEMAS = {
    "persons": "id bigint, name string, email_address string, credit_card string, city string, state string, "
    "date_time bigint, extra string",
    "auctions": "id bigint, item_name string, description string, initial_bid bigint, reserve bigint, "
    "date_time bigint, expires bigint, seller bigint, category bigint, extra string",
    "bids": "auction bigint, bidder bigint, price bigint, channel string, url string, date_time bigint, "
    "extra string",
}
BID_FIELDS = ("auction", "bidder", "price", "channel", "url", "date_time", "extra")
#: The fields of an output record each query's answer compares (timestamps as epoch milliseconds).
OUTPUT_FIELDS: dict[str, tuple[str, ...]] = {
    "q0": BID_FIELDS,
    "q1": BID_FIELDS,
    "q2": ("auction", "price"),
    "q5": ("auction", "num", "starttime", "endtime"),
    "q7": ("auction", "price", "bidder", "date_time", "extra"),
    "q8": ("id", "name", "starttime"),
}
#: Nexmark q1's dollar-to-euro rate.
EURO = 0.908
#: Nexmark q2's selection: auctions whose id is a multiple of this.
Q2_MODULUS = 123
#: The watermark's bound of every windowed query (bench/nexmark_queries.py).
OUT_OF_ORDER_MS = 5_000
WINDOW_MS = 10_000
SLIDE_MS = 2_000
FIRST_ID = 1000
CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
_FIRST = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
_LAST = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
)
_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")


@dataclass(frozen=True)
class Event:
    """One generated event: its kind (`persons`, `auctions`, `bids`) and its record (JSON-ready fields)."""

    kind: str
    record: dict[str, Any]


def events(seed: int = 12, rate: int = 1000, base_ms: int = 1_800_000_000_000) -> Iterator[Event]:
    """Nexmark's events (see the module docstring), in event-time order, without end."""
    rng = random.Random(seed)
    persons = auctions = 0
    for n in itertools.count():
        at = base_ms + n * 1000 // rate
        slot = n % 50
        if slot == 0:
            ident = FIRST_ID + persons
            persons += 1
            yield Event(
                "persons",
                {
                    "id": ident,
                    "name": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
                    "email_address": f"user{ident}@nexmark.com",
                    "credit_card": " ".join(f"{rng.randrange(10_000):04d}" for _ in range(4)),
                    "city": rng.choice(_CITIES),
                    "state": rng.choice(_STATES),
                    "date_time": at,
                    "extra": "",
                },
            )
        elif slot <= 3:
            ident = FIRST_ID + auctions
            auctions += 1
            initial = 100 + rng.randrange(10_000)
            newest = FIRST_ID + persons - 1
            seller = newest if rng.random() < 0.5 else max(FIRST_ID, newest - rng.randrange(20))
            yield Event(
                "auctions",
                {
                    "id": ident,
                    "item_name": f"item-{ident}",
                    "description": f"description of item {ident}",
                    "initial_bid": initial,
                    "reserve": initial + rng.randrange(10_000),
                    "date_time": at,
                    "expires": at + 10_000 + rng.randrange(100_000),
                    "seller": seller,
                    "category": 10 + rng.randrange(5),
                    "extra": "",
                },
            )
        else:
            newest_auction = FIRST_ID + auctions - 1
            if rng.random() < 0.5:
                auction = max(FIRST_ID, newest_auction // 10 * 10)
            else:
                auction = max(FIRST_ID, newest_auction - rng.randrange(100))
            newest_person = FIRST_ID + persons - 1
            bidder = (
                newest_person if rng.random() < 0.5 else max(FIRST_ID, newest_person - rng.randrange(1000))
            )
            channel = rng.choice(CHANNELS)
            yield Event(
                "bids",
                {
                    "auction": auction,
                    "bidder": bidder,
                    "price": int(100 * 10 ** (rng.random() * 4)),
                    "channel": channel,
                    "url": f"https://www.nexmark.com/{channel.lower()}/item.htm?query=1",
                    "date_time": at,
                    "extra": "",
                },
            )


def span(each: int) -> int:
    """How many events `take(each)` reads from the stream (at most; for choosing a base time)."""
    return each * 50 // 4 + 50


def take(
    each: int, seed: int = 12, rate: int = 1000, base_ms: int = 1_800_000_000_000
) -> dict[str, list[Any]]:
    """The records per kind that give every query `each` input events: the bids among the stream's first events up
    to its `each`-th bid, and the persons and auctions up to its `each`-th person-or-auction (q8 reads both kinds).
    One stream cut at two points: each query's input is a prefix of the same event stream."""
    by_kind: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    sellers_side = 0
    for event in events(seed, rate, base_ms):
        if event.kind == "bids":
            if len(by_kind["bids"]) < each:
                by_kind["bids"].append(event.record)
        elif sellers_side < each:
            by_kind[event.kind].append(event.record)
            sellers_side += 1
        if sellers_side >= each and len(by_kind["bids"]) >= each:
            return by_kind
    raise AssertionError("the event stream has no end")


# -- the answers ----------------------------------------------------------------------------------------------------
def _watermark(by_kind: dict[str, list[dict[str, Any]]], kinds: tuple[str, ...]) -> int:
    """The query's watermark once all its input is read: min over its inputs of (largest event time - bound)."""
    return min(max(r["date_time"] for r in by_kind[k]) for k in kinds) - OUT_OF_ORDER_MS


def _tumble(at: int, size: int = WINDOW_MS) -> int:
    return at - at % size


def answer(query: str, by_kind: dict[str, list[dict[str, Any]]]) -> Counter[tuple[Any, ...]]:
    """The multiset of output tuples (fields `OUTPUT_FIELDS[query]`) the query must write for these events."""
    bids = by_kind["bids"]
    if query == "q0":
        return Counter(tuple(b[f] for f in BID_FIELDS) for b in bids)
    if query == "q1":
        return Counter(tuple(b["price"] * EURO if f == "price" else b[f] for f in BID_FIELDS) for b in bids)
    if query == "q2":
        return Counter((b["auction"], b["price"]) for b in bids if b["auction"] % Q2_MODULUS == 0)
    if query == "q5":
        return _hot_items(bids, _watermark(by_kind, QUERIES[query]))
    if query == "q7":
        return _highest_bids(bids, _watermark(by_kind, QUERIES[query]))
    if query == "q8":
        return _new_sellers(by_kind["persons"], by_kind["auctions"])
    raise ValueError(f"unknown query {query!r}")


def _hot_items(bids: list[dict[str, Any]], watermark: int) -> Counter[tuple[Any, ...]]:
    """q5: per closed hopping window (10 s every 2 s), the auctions with the most bids, with their count."""
    counts: dict[int, Counter[int]] = defaultdict(Counter)
    for b in bids:
        last = _tumble(b["date_time"], SLIDE_MS)
        for start in range(last, b["date_time"] - WINDOW_MS, -SLIDE_MS):
            counts[start][b["auction"]] += 1
    out: Counter[tuple[Any, ...]] = Counter()
    for start, per_auction in counts.items():
        if start + WINDOW_MS > watermark:
            continue
        top = max(per_auction.values())
        for auction, num in per_auction.items():
            if num == top:
                out[(auction, num, start, start + WINDOW_MS)] += 1
    return out


def _highest_bids(bids: list[dict[str, Any]], watermark: int) -> Counter[tuple[Any, ...]]:
    """q7: per closed tumbling 10 s window, the bid(s) with the window's highest price."""
    top: dict[int, int] = {}
    for b in bids:
        window = _tumble(b["date_time"])
        top[window] = max(top.get(window, 0), b["price"])
    return Counter(
        (b["auction"], b["price"], b["bidder"], b["date_time"], b["extra"])
        for b in bids
        if _tumble(b["date_time"]) + WINDOW_MS <= watermark and b["price"] == top[_tumble(b["date_time"])]
    )


def _new_sellers(persons: list[dict[str, Any]], auctions: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """q8: persons who opened an auction in the tumbling 10 s window they registered in (once per person)."""
    sold = {(a["seller"], _tumble(a["date_time"])) for a in auctions}
    return Counter(
        (p["id"], p["name"], _tumble(p["date_time"]))
        for p in persons
        if (p["id"], _tumble(p["date_time"])) in sold
    )


# -- the output ----------------------------------------------------------------------------------------------------
def _millis(value: Any) -> Any:
    """An output timestamp (ISO-8601 text, `Z` or an offset) as epoch milliseconds; anything else unchanged."""
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == "T":
        parsed = dt.datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return round(parsed.timestamp() * 1000)
    return value


def row(query: str, record: dict[str, Any]) -> tuple[Any, ...]:
    """An output record (decoded JSON) as the tuple its query's answer holds; a missing field is None."""
    return tuple(_millis(record.get(f)) for f in OUTPUT_FIELDS[query])


def compare(expected: Counter[tuple[Any, ...]], got: Counter[tuple[Any, ...]]) -> dict[str, int]:
    """Lost (expected, missing), duplicates (expected, written more often) and unexpected output tuples."""
    return {
        "expected": sum(expected.values()),
        "written": sum(got.values()),
        "lost": sum(max(0, n - got[k]) for k, n in expected.items()),
        "duplicates": sum(max(0, n - expected[k]) for k, n in got.items() if k in expected),
        "unexpected": sum(n for k, n in got.items() if k not in expected),
    }
