"""Source offsets as Spark sees them, and the pure functions over them.

An offset is `{topic: {partition (str): next offset to read (int)}}`: JSON-friendly, as Spark's offset log needs.
Everything here is pure, so Spark's replay of a logged batch plans exactly the same partitions.
"""

from __future__ import annotations

from collections.abc import Mapping

SourceOffset = dict[str, dict[str, int]]
TopicPartitionKey = tuple[str, int]


def to_flat(offset: Mapping[str, Mapping[str, int]]) -> dict[TopicPartitionKey, int]:
    """`{topic: {"p": o}}` → `{(topic, p): o}`."""
    return {(topic, int(p)): int(o) for topic, parts in offset.items() for p, o in parts.items()}


def from_flat(flat: Mapping[TopicPartitionKey, int]) -> SourceOffset:
    """`{(topic, p): o}` → `{topic: {"p": o}}`, topics and partitions sorted."""
    out: SourceOffset = {}
    for (topic, partition), offset in sorted(flat.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def ranges(
    start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]], include_empty: bool = False
) -> list[tuple[str, int, int, int]]:
    """Return the `(topic, partition, from, until)` ranges between two offsets, sorted by topic-partition;
    empty ones only with `include_empty`.

    A partition absent from `start` (added while the job ran) is read from offset 0, which the consumer resets
    to the earliest retained offset: the same records on every replay.
    """
    begin = to_flat(start)
    out = []
    for (topic, partition), until in sorted(to_flat(end).items()):
        frm = begin.get((topic, partition), 0)
        if until > frm or include_empty:
            out.append((topic, partition, frm, max(frm, until)))
    return out


def limit_offsets(
    start: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int], max_records: int
) -> dict[TopicPartitionKey, int]:
    """Admission control: advance at most `max_records` offsets in total from `start` towards `latest`.

    The budget is shared in proportion to each partition's backlog (largest remainders first, ties by name), so
    the result is a deterministic function of its arguments and every partition with a backlog makes progress
    when the budget allows it.
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in latest}
    total = sum(backlog.values())
    if max_records <= 0 or total <= max_records:
        return dict(latest)
    shares = {tp: max_records * lag // total for tp, lag in backlog.items()}
    left = max_records - sum(shares.values())
    order = sorted(backlog, key=lambda tp: (-(max_records * backlog[tp] % total), tp))
    for tp in order:
        if left <= 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            left -= 1
    return {tp: start.get(tp, 0) + shares[tp] for tp in latest}
