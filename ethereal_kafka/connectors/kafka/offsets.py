"""Offsets: where each input partition stands, and the pure functions over them.

Two forms, one meaning (the next offset to read, per topic-partition):

* `Offsets` — the one type the framework passes around: an immutable mapping `{(topic, partition): offset}` with
  integer partitions, iterated in topic-partition order.
* `SourceOffset` — its JSON form `{topic: {"partition": offset}}` (string partitions), used only where JSON is the
  contract: Spark's offset log and the source API (`latestOffset`, `partitions`), and the checkpoint history.
  `Offsets.from_json` and `Offsets.to_json` convert at those edges.

Everything here is pure, so Spark's replay of a logged batch plans exactly the same partitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

SourceOffset = dict[str, dict[str, int]]
TopicPartitionKey = tuple[str, int]


class Offsets(Mapping[TopicPartitionKey, int]):
    """Offsets by `(topic, partition)`: immutable, hashable, iterated in topic-partition order."""

    __slots__ = ("_items",)

    def __init__(
        self, items: Mapping[TopicPartitionKey, int] | Iterable[tuple[TopicPartitionKey, int]] = ()
    ) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        self._items: dict[TopicPartitionKey, int] = {
            (str(t), int(p)): int(o)
            for (t, p), o in sorted(pairs, key=lambda kv: (str(kv[0][0]), int(kv[0][1])))
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Mapping[str | int, int]]) -> Offsets:
        """From the JSON form `{topic: {"partition": offset}}` (partitions as strings or ints)."""
        return cls(((topic, int(p)), int(o)) for topic, parts in value.items() for p, o in parts.items())

    def to_json(self) -> SourceOffset:
        """The JSON form `{topic: {"partition": offset}}`, topics and partitions sorted."""
        out: SourceOffset = {}
        for (topic, partition), offset in self._items.items():
            out.setdefault(topic, {})[str(partition)] = offset
        return out

    def topics(self) -> list[str]:
        """The topics, sorted."""
        return sorted({topic for topic, _ in self._items})

    def only(self, topics: Iterable[str]) -> Offsets:
        """The offsets of `topics` only."""
        wanted = set(topics)
        return Offsets({tp: o for tp, o in self._items.items() if tp[0] in wanted})

    def merged(self, *others: Mapping[TopicPartitionKey, int]) -> Offsets:
        """These offsets updated with `others` in order (a later one wins for a partition in several)."""
        out = dict(self._items)
        for other in others:
            out.update(other)
        return Offsets(out)

    def __getitem__(self, key: TopicPartitionKey) -> int:
        return self._items[key]

    def __iter__(self) -> Iterator[TopicPartitionKey]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return f"Offsets({self.to_json()})"


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
