"""`ethereal-kafka diff`: a shadow run's output against production's output of the same input range, per key.

For each production sink topic of the range (`checkpoint.shadows.ShadowRecord.outputs`) the production records in
`[starts, ends)` and every record of the shadow topic are read read_committed and grouped by record key (records
without a key form one group). Within a key, records keep their order (partition, then offset: one key lives in one
partition when both sides partition alike). A key is *same* when both sides hold the same sequence of (value,
headers), *changed* when both hold records that differ, *added* when only the shadow has it, *removed* when only
production has it. Record timestamps are not compared (they are the write time). A deterministic job replayed from
the same savepoint over the same range diffs to zero.

A topic two production queries write is not compared (its records have no cut at an epoch), and is named. Both sides
are held in memory: a diff is for ranges a person inspects, not for a topic's whole history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ethereal_kafka.checkpoint.shadows import OutputRange, ShadowRecord
from ethereal_kafka.connectors.kafka.console_io import read_range
from ethereal_kafka.connectors.kafka.topic_admin import end_offsets
from ethereal_kafka.connectors.kafka.topics import ReadRecord

#: What a key's records are compared by.
Entry = tuple[bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass(frozen=True)
class KeyDiff:
    """One key that differs.

    Attributes:
        how: "changed", "added" or "removed".
        index: The position within the key of the first record that differs.
        production, shadow: That record on each side (None where the side has no record there).
    """

    key: bytes | None
    how: str
    index: int
    production: Entry | None
    shadow: Entry | None


@dataclass(frozen=True)
class TopicDiff:
    """The comparison of one production topic with its shadow topic.

    Attributes:
        skipped: Why the topic was not compared (None when it was).
        differences: Every key that differs, in key order.
    """

    topic: str
    shadow_topic: str
    production_records: int
    shadow_records: int
    keys: int
    same: int
    differences: Sequence[KeyDiff]
    skipped: str | None = None

    def count(self, how: str) -> int:
        """Keys that differ as `how` ("changed", "added", "removed")."""
        return sum(1 for d in self.differences if d.how == how)


def compare(production: Sequence[ReadRecord], shadow: Sequence[ReadRecord]) -> tuple[int, list[KeyDiff]]:
    """Per key, `production` against `shadow` (each in the order read): the number of same keys and every key
    that differs, in key order (no key first)."""
    left, right = _by_key(production), _by_key(shadow)
    same = 0
    differences: list[KeyDiff] = []
    for key in sorted(set(left) | set(right), key=lambda k: (k is not None, k or b"")):
        ours, theirs = left.get(key, []), right.get(key, [])
        if ours == theirs:
            same += 1
            continue
        index = next(
            (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
            min(len(ours), len(theirs)),
        )
        how = "added" if not ours else "removed" if not theirs else "changed"
        differences.append(
            KeyDiff(
                key,
                how,
                index,
                ours[index] if index < len(ours) else None,
                theirs[index] if index < len(theirs) else None,
            )
        )
    return same, differences


def _by_key(records: Sequence[ReadRecord]) -> dict[bytes | None, list[Entry]]:
    out: dict[bytes | None, list[Entry]] = {}
    for record in records:
        out.setdefault(record.key, []).append((record.value, tuple(record.headers)))
    return out


def diff_shadow(record: ShadowRecord, bootstrap: str, settings: Mapping[str, str]) -> list[TopicDiff]:
    """Compare every production topic of `record` with its shadow topic (see the module docstring).

    Raises:
        KafkaConnectionError: the cluster did not answer, or a range could not be read to its end.
    """
    out = []
    for output in record.outputs:
        if len(output.writers) > 1:
            out.append(
                TopicDiff(
                    output.topic, output.shadow_topic, 0, 0, 0, 0, (),
                    f"written by queries {', '.join(output.writers)}: their records have no cut at an epoch",
                )
            )  # fmt: skip
            continue
        production = read_range(bootstrap, output.topic, _ranges(output), settings)
        shadow_ends = end_offsets(bootstrap, [output.shadow_topic], settings).get(output.shadow_topic, {})
        shadow = read_range(
            bootstrap, output.shadow_topic, {p: (0, end) for p, end in shadow_ends.items()}, settings
        )
        same, differences = compare(production, shadow)
        keys = same + len(differences)
        out.append(
            TopicDiff(
                output.topic, output.shadow_topic, len(production), len(shadow), keys, same, differences
            )
        )
    return out


def _ranges(output: OutputRange) -> dict[int, tuple[int, int]]:
    return {int(p): (int(output.starts.get(p, 0)), int(end)) for p, end in output.ends.items()}


def render(diffs: Sequence[TopicDiff], show: int) -> list[str]:
    """The diff for people: one summary line per topic, then up to `show` differing keys per topic, one line each
    (the first record that differs on each side)."""
    lines = []
    for diff in diffs:
        head = f"{diff.topic} vs {diff.shadow_topic}:"
        if diff.skipped is not None:
            lines.append(f"{head} not compared ({diff.skipped})")
            continue
        lines.append(
            f"{head} {diff.production_records} production record(s), {diff.shadow_records} shadow record(s); "
            f"{diff.keys} key(s): {diff.same} same, {diff.count('changed')} changed, {diff.count('added')} added, "
            f"{diff.count('removed')} removed"
        )
        for d in diff.differences[:show]:
            lines.append(
                f"  {d.how} key {_text(d.key)}: record {d.index + 1}: production {_entry(d.production)}, "
                f"shadow {_entry(d.shadow)}"
            )
        if len(diff.differences) > show:
            lines.append(f"  ... and {len(diff.differences) - show} more key(s) (--show N)")
    return lines


def _entry(entry: Entry | None) -> str:
    if entry is None:
        return "none"
    value, headers = entry
    text = _text(value)
    if headers:
        text += " headers " + ", ".join(f"{k}={_text(v)}" for k, v in headers)
    return text


def _text(raw: bytes | None, limit: int = 160) -> str:
    if raw is None:
        return "null"
    try:
        text = repr(raw.decode("utf-8"))
    except UnicodeDecodeError:
        text = "0x" + raw.hex()
    return text if len(text) <= limit else text[: limit - 3] + "..."
