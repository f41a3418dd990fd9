"""Nexmark's event stream for bench/nexmark.py, and each query's answer computed in plain Python.

Every system of the bench (ethereal-kafka, Spark's own engine, Flink) reads the same topics and is checked against
the same answers, so this module imports nothing beyond the standard library (the Flink peer runs in a virtualenv of
its own and imports it for the schemas).

The generator follows Nexmark's model (the Beam/Flink Nexmark generator's proportions and fields; its code is not
copied): event `n` of the stream is a person when `n % 50 == 0`, an auction when `n % 50` is 1-3, else a bid
(1 : 3 : 46), and its event time is `base_ms + n * 1000 // rate` (`rate` events per second of event time). Persons and
auctions get increasing ids from 1000; an auction's seller is the newest person half of the time, else one of the 20
newest; a bid's auction is a "hot" one (the newest auction rounded down to a multiple of 10) half of the time, else
one of the 100 newest; its bidder is the newest person half of the time, else one of the 1,000 newest; prices are
log-uniform in [100, 1,000,000). Each kind draws from a `random.Random` of its own (seeded by `seed` and the kind), so
a kind's records can be generated without the others' (`records(kind, count)`): q8 reads the first 2M persons and
auctions of a stream whose first 2M bids the other queries read, 25M events in, and the 23M bids in between are
never built. The windowed word count (`wc`) reads a fourth kind, `lines`: line `i` at `base_ms + i * 1000 // rate`,
3-8 lower-case words (separated by one space) drawn from a vocabulary of `VOCABULARY` words, skewed (word `k` drawn
about `1 / (k + 1)` as often as word 0).

**Sentinels.** After its records, every partition of every topic gets one sentinel record (`sentinel(kind)`), whose
event time is 60 s after the kind's last record (`SENTINEL_GAP_MS`). Every engine then ends with a watermark about
55 s past the last real record, so every window holding real records closes in every engine, whatever its exact
watermark rule (Spark: the largest event time over all partitions minus the bound, a window fires once the watermark
reaches its end; Flink: the smallest over the partitions, a window fires at its end minus 1 ms). The sentinels'
own windows stay open in all of them, and no sentinel joins or passes a selection (ids 0 and -1).

The answers (`Answers`) are what a query computes once its input, sentinels included, has been read and the
watermark reached (the largest event time of each input minus `OUT_OF_ORDER_MS`, the smallest over the inputs):
window results only for windows ending at or before that watermark, and for q8 every match. Each answer is a
multiset of tuples, the same shape `row(query, record)` gives an output record.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

#: The queries, in the order the bench runs them, and the event kinds (topics) each one reads.
QUERIES: dict[str, tuple[str, ...]] = {
    "q0": ("bids",),
    "q1": ("bids",),
    "q2": ("bids",),
    "q5": ("bids",),
    "q7": ("bids",),
    "q8": ("persons", "auctions"),
    "wc": ("lines",),
}
KINDS = ("persons", "auctions", "bids", "lines")
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
    "wc": ("word", "window_start", "count"),
}
#: Nexmark q1's dollar-to-euro rate.
EURO = 0.908
#: Nexmark q2's selection: auctions whose id is a multiple of this.
Q2_MODULUS = 123
#: The watermark's bound of every windowed query (bench/nexmark_queries.py and the peers).
OUT_OF_ORDER_MS = 5_000
WINDOW_MS = 10_000
SLIDE_MS = 2_000
#: How far after a kind's last record its sentinels are (see the module docstring).
SENTINEL_GAP_MS = 60_000
FIRST_ID = 1000
#: Events per block of the stream, and how many of them are persons and auctions (the rest are bids).
BLOCK = 50
PERSONS_AUCTIONS = 4
CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
VOCABULARY = 500
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
_SYLLABLES = ("ka", "fo", "ri", "sta", "mel", "on", "ce", "tra", "pu", "dex", "lo", "vin", "ar", "so", "ne")


def words() -> tuple[str, ...]:
    """The word count's vocabulary: `VOCABULARY` distinct lower-case words (made of syllables, fixed)."""
    out: list[str] = []
    n = len(_SYLLABLES)
    for i in range(VOCABULARY):
        parts = [_SYLLABLES[i % n], _SYLLABLES[(i // n) % n], _SYLLABLES[(i // (n * n)) % n]]
        out.append("".join(parts[: 2 + (i >= n * n)]) + ("" if i < n * n else str(i)))
    assert len(set(out)) == VOCABULARY
    return tuple(out)


def _at(n: int, rate: int, base_ms: int) -> int:
    return base_ms + n * 1000 // rate


def records(
    kind: str, count: int, seed: int = 12, rate: int = 1000, base_ms: int = 1_800_000_000_000
) -> Iterator[dict[str, Any]]:
    """The first `count` records of one kind, in event-time order (see the module docstring)."""
    rng = random.Random(f"{seed}-{kind}")
    if kind == "persons":
        for i in range(count):
            ident = FIRST_ID + i
            yield {
                "id": ident,
                "name": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
                "email_address": f"user{ident}@nexmark.com",
                "credit_card": " ".join(f"{rng.randrange(10_000):04d}" for _ in range(4)),
                "city": rng.choice(_CITIES),
                "state": rng.choice(_STATES),
                "date_time": _at(BLOCK * i, rate, base_ms),
                "extra": "",
            }
    elif kind == "auctions":
        for i in range(count):
            n = BLOCK * (i // 3) + 1 + i % 3
            at = _at(n, rate, base_ms)
            initial = 100 + rng.randrange(10_000)
            newest = FIRST_ID + n // BLOCK
            seller = newest if rng.random() < 0.5 else max(FIRST_ID, newest - rng.randrange(20))
            yield {
                "id": FIRST_ID + i,
                "item_name": f"item-{FIRST_ID + i}",
                "description": f"description of item {FIRST_ID + i}",
                "initial_bid": initial,
                "reserve": initial + rng.randrange(10_000),
                "date_time": at,
                "expires": at + 10_000 + rng.randrange(100_000),
                "seller": seller,
                "category": 10 + rng.randrange(5),
                "extra": "",
            }
    elif kind == "bids":
        per_block = BLOCK - PERSONS_AUCTIONS
        for i in range(count):
            n = BLOCK * (i // per_block) + PERSONS_AUCTIONS + i % per_block
            newest_auction = FIRST_ID + 3 * (n // BLOCK) + 2
            if rng.random() < 0.5:
                auction = newest_auction // 10 * 10
            else:
                auction = max(FIRST_ID, newest_auction - rng.randrange(100))
            newest_person = FIRST_ID + n // BLOCK
            bidder = (
                newest_person if rng.random() < 0.5 else max(FIRST_ID, newest_person - rng.randrange(1000))
            )
            channel = rng.choice(CHANNELS)
            yield {
                "auction": auction,
                "bidder": bidder,
                "price": int(100 * 10 ** (rng.random() * 4)),
                "channel": channel,
                "url": f"https://www.nexmark.com/{channel.lower()}/item.htm?query=1",
                "date_time": _at(n, rate, base_ms),
                "extra": "",
            }
    elif kind == "lines":
        vocabulary = words()
        cumulative = list(itertools.accumulate(1 / (k + 1) for k in range(VOCABULARY)))
        for i in range(count):
            chosen = rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(3, 8))
            yield {"line": " ".join(chosen), "date_time": _at(i, rate, base_ms)}
    else:
        raise ValueError(f"unknown kind {kind!r}")


def counts(each: int) -> dict[str, int]:
    """Records per kind that give every query `each` input events: `each` bids and `each` lines, and the first
    `each` persons-or-auctions of the stream (q8 reads both kinds; one person per three auctions)."""
    persons = (each + PERSONS_AUCTIONS - 1) // PERSONS_AUCTIONS
    return {"persons": persons, "auctions": each - persons, "bids": each, "lines": each}


def span_ms(each: int, rate: int = 1000) -> int:
    """Event time the stream of `counts(each)` spans, sentinels included (for choosing a base time)."""
    last = max(BLOCK * (counts(each)["persons"] + 1), each)
    return last * 1000 // rate + SENTINEL_GAP_MS + 1000


def sentinel(kind: str, at: int) -> dict[str, Any]:
    """The record that ends a kind's partitions (see the module docstring): event time `at`, matching nothing."""
    if kind == "persons":
        fields = ("email_address", "credit_card", "city", "state", "extra")
        return {"id": 0, "name": "sentinel", "date_time": at} | dict.fromkeys(fields, "")
    if kind == "auctions":
        numbers = {"initial_bid": 0, "reserve": 0, "expires": at, "seller": -1, "category": 0}
        return {"id": 0, "item_name": "", "description": "", "date_time": at, "extra": ""} | numbers
    if kind == "bids":
        return {
            "auction": -1,
            "bidder": -1,
            "price": 0,
            "channel": "",
            "url": "",
            "date_time": at,
            "extra": "",
        }
    return {"line": "sentinel", "date_time": at}


def value(kind: str, record: dict[str, Any]) -> bytes | str:
    """A record as its Kafka value: JSON for persons, auctions and bids; the bare text for lines."""
    if kind == "lines":
        return str(record["line"]).encode()
    import json

    return json.dumps(record, separators=(",", ":")).encode()


# -- the answers ----------------------------------------------------------------------------------------------------
def _tumble(at: int, size: int = WINDOW_MS) -> int:
    return at - at % size


class Answers:
    """Each chosen query's answer, built record by record as the input is generated (no record is kept).

    Call `add(kind, record)` for every record written, sentinels included, then `answer(query)`.
    """

    def __init__(self, queries: list[str]) -> None:
        self.queries = set(queries)
        self.last: dict[str, int] = {}
        self._plain: dict[str, Counter[tuple[Any, ...]]] = {q: Counter() for q in ("q0", "q1", "q2")}
        self._hop: dict[int, Counter[int]] = defaultdict(Counter)
        self._top: dict[int, tuple[int, list[tuple[Any, ...]]]] = {}
        self._persons: dict[tuple[int, int], tuple[int, str, int]] = {}
        self._sold: set[tuple[int, int]] = set()
        self._words: Counter[tuple[str, int]] = Counter()

    def add(self, kind: str, record: dict[str, Any]) -> None:
        """Account for one written record of `kind`."""
        at = record["date_time"]
        self.last[kind] = max(self.last.get(kind, at), at)
        if kind == "bids":
            self._bid(record, at)
        elif kind == "persons" and "q8" in self.queries:
            self._persons[(record["id"], _tumble(at))] = (record["id"], record["name"], _tumble(at))
        elif kind == "auctions" and "q8" in self.queries:
            self._sold.add((record["seller"], _tumble(at)))
        elif kind == "lines" and "wc" in self.queries:
            window = _tumble(at)
            for word in record["line"].split(" "):
                if word:
                    self._words[(word, window)] += 1

    def _bid(self, b: dict[str, Any], at: int) -> None:
        if "q0" in self.queries:
            self._plain["q0"][tuple(b[f] for f in BID_FIELDS)] += 1
        if "q1" in self.queries:
            self._plain["q1"][tuple(b["price"] * EURO if f == "price" else b[f] for f in BID_FIELDS)] += 1
        if "q2" in self.queries and b["auction"] % Q2_MODULUS == 0:
            self._plain["q2"][(b["auction"], b["price"])] += 1
        if "q5" in self.queries:
            for start in range(_tumble(at, SLIDE_MS), at - WINDOW_MS, -SLIDE_MS):
                self._hop[start][b["auction"]] += 1
        if "q7" in self.queries:
            window = _tumble(at)
            entry = (b["auction"], b["price"], b["bidder"], at, b["extra"])
            best = self._top.get(window)
            if best is None or b["price"] > best[0]:
                self._top[window] = (b["price"], [entry])
            elif b["price"] == best[0]:
                best[1].append(entry)

    def watermark(self, query: str) -> int:
        """The query's watermark once all its input is read: min over its inputs of (largest event time - bound)."""
        return min(self.last[k] for k in QUERIES[query]) - OUT_OF_ORDER_MS

    def answer(self, query: str) -> Counter[tuple[Any, ...]]:
        """The multiset of output tuples (fields `OUTPUT_FIELDS[query]`) the query must write."""
        if query in self._plain:
            return self._plain[query]
        watermark = self.watermark(query)
        out: Counter[tuple[Any, ...]] = Counter()
        if query == "q5":  # per closed hopping window, the auctions with the most bids
            for start, per_auction in self._hop.items():
                if start + WINDOW_MS <= watermark:
                    top = max(per_auction.values())
                    out.update((a, n, start, start + WINDOW_MS) for a, n in per_auction.items() if n == top)
        elif query == "q7":  # per closed tumbling window, the bid(s) with the highest price
            for window, (_, entries) in self._top.items():
                if window + WINDOW_MS <= watermark:
                    out.update(entries)
        elif query == "q8":  # persons who opened an auction in the tumbling window they registered in
            out.update(p for key, p in self._persons.items() if key in self._sold)
        elif query == "wc":  # words per closed tumbling window
            for (word, window), n in self._words.items():
                if window + WINDOW_MS <= watermark:
                    out[(word, window, n)] += 1
        else:
            raise ValueError(f"unknown query {query!r}")
        return out


def covered(query: str, row: tuple[Any, ...]) -> int:
    """The event time up to which an output row proves its query has read its input: a window result needs the
    watermark past the window's end (`end + bound`); a q8 match at least its window's start (a lower bound: Spark
    emits a match as soon as both sides arrived). Rows of the stateless queries carry their bid's time."""
    if query == "q5":
        return int(row[3]) + OUT_OF_ORDER_MS
    if query == "q7":
        return _tumble(int(row[3])) + WINDOW_MS + OUT_OF_ORDER_MS
    if query == "q8":
        return int(row[2])
    if query == "wc":
        return int(row[1]) + WINDOW_MS + OUT_OF_ORDER_MS
    if query in ("q0", "q1"):
        return int(row[5])
    return 0  # q2 rows carry no time


# -- the output ----------------------------------------------------------------------------------------------------
def _millis(value: Any) -> Any:
    """An output timestamp (ISO-8601 text, `Z`, an offset or none: UTC) as epoch milliseconds; anything else
    unchanged."""
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] in "T ":
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
