import random

from ethereal_kafka.connectors.kafka.offsets import from_flat, limit_offsets, ranges, to_flat


def test_flat_round_trip_is_sorted() -> None:
    nested = {"b": {"1": 5, "0": 3}, "a": {"0": 1}}
    assert from_flat(to_flat(nested)) == {"a": {"0": 1}, "b": {"0": 3, "1": 5}}
    assert list(from_flat(to_flat(nested))) == ["a", "b"]


def test_ranges_skip_empty_and_read_new_partitions_from_zero() -> None:
    start = {"t": {"0": 10, "1": 4}}
    end = {"t": {"0": 10, "1": 9, "2": 3}}
    assert ranges(start, end) == [("t", 1, 4, 9), ("t", 2, 0, 3)]


def test_limit_offsets_is_bounded_fair_and_deterministic() -> None:
    rng = random.Random(7)
    for _ in range(200):
        tps = [("t", p) for p in range(rng.randint(1, 6))]
        start = {tp: rng.randint(0, 50) for tp in tps}
        latest = {tp: start[tp] + rng.randint(0, 400) for tp in tps}
        budget = rng.randint(1, 500)
        got = limit_offsets(start, latest, budget)
        assert got == limit_offsets(dict(reversed(list(start.items()))), latest, budget)
        taken = sum(got[tp] - start[tp] for tp in tps)
        backlog = sum(latest[tp] - start[tp] for tp in tps)
        assert taken == min(budget, backlog)
        assert all(start[tp] <= got[tp] <= latest[tp] for tp in tps)


def test_no_limit_returns_latest() -> None:
    latest = {("t", 0): 100}
    assert limit_offsets({("t", 0): 0}, latest, 0) == latest
