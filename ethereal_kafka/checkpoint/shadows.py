"""A shadow run's range of production: which input it reads and which production output that input gave.

`ethereal-kafka shadow JOB --from-savepoint SP --until now|OFFSETS --into SUFFIX` runs a version of an app over input
the production app already processed, from a savepoint of it up to a committed epoch of it, into topics of its own;
`ethereal-kafka diff` then compares the two outputs of that range. This module finds the range from the app's
checkpoint history (`checkpoint.history`) and keeps what a shadow run did (`ShadowRecord`), for `diff`.

The range, per query of the production app (`production_range`):

* **Input**: from the savepoint's offsets to the end offsets of a committed epoch: the newest one (`now`), or the one
  that ended exactly at the offsets given. The epochs between are one contiguous run of production, found by
  walking back from that epoch while each epoch starts where the one before it ended, until one starts at the
  savepoint's offsets (so a restore from the savepoint, or a plain restart after it, both count; a replay that
  rewound production in between ends the walk, and the range is refused).
* **Output**: the high watermarks of the query's sink topics recorded right after the committed epoch before the
  range (`EpochRecord.output_ends`; for the savepoint's own epoch, the savepoint's `Manifest.output_ends` when the
  history has none) up to those recorded after the range's last epoch. The epochs of one query are sequential, so
  exactly the range's output lies between. A topic that two queries write has no such cut: it is named, not
  compared.

Every refusal is one line naming the app, query or epoch and the way out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ethereal_kafka.checkpoint.apps import app_dir
from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.checkpoint.savepoints import Manifest
from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.paths import write_durably

Partitions = dict[tuple[str, int], int]


class ShadowError(EtherealKafkaError):
    """A shadow run or a diff cannot be made as asked (the message names the app, query, epoch or topic)."""


@dataclass(frozen=True)
class OutputRange:
    """One production sink topic's output of a shadow range.

    Attributes:
        topic: The production topic.
        shadow_topic: The topic the shadow run wrote instead.
        starts, ends: `{partition: offset}`: production's output of the range is `[starts, ends)` per partition.
        writers: The production queries that write the topic (more than one: no exact cut, not compared).
    """

    topic: str
    shadow_topic: str
    starts: Mapping[str, int]
    ends: Mapping[str, int]
    writers: Sequence[str]


@dataclass(frozen=True)
class ShadowRecord:
    """What a shadow run did, kept at `<cache>/apps/<app>/shadows/<suffix>.json` for `diff`.

    Attributes:
        app_id: The production app.
        suffix: The shadow's name (`--into`); its topics are `<topic>.<suffix>`.
        shadow_app_id: The app id the shadow ran under.
        savepoint: The savepoint folder it started from.
        job_file: The version it ran.
        input_starts, input_ends: `{topic: {partition: offset}}`: the input range.
        epochs: Per production query, the committed epoch the range ends at (`checkpoint id:epoch`).
        outputs: Per production sink topic, the production range and the shadow topic.
        shadow_records: Records the shadow run committed (-1: unknown).
        created_ms: When the shadow ran (wall clock, for people).
    """

    app_id: str
    suffix: str
    shadow_app_id: str
    savepoint: str
    job_file: str
    input_starts: Mapping[str, Mapping[str, int]]
    input_ends: Mapping[str, Mapping[str, int]]
    epochs: Mapping[str, str]
    outputs: Sequence[OutputRange]
    shadow_records: int = -1
    created_ms: int = 0
    extra_topics: Sequence[str] = field(default_factory=tuple)

    def to_json(self) -> str:
        """The record as JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> ShadowRecord:
        """Parse `to_json` output.

        Raises:
            ShadowError: not a shadow record (`where` names the file).
        """
        try:
            raw = json.loads(text)
            raw["outputs"] = tuple(
                OutputRange(**{**o, "writers": tuple(o["writers"])}) for o in raw["outputs"]
            )
            raw["extra_topics"] = tuple(raw.get("extra_topics", ()))
            return cls(**raw)
        except (ValueError, KeyError, TypeError) as exc:
            raise ShadowError(f"{where}: not a shadow record ({exc})") from exc


def record_path(app_id: str, suffix: str) -> Path:
    """Where the record of shadow `suffix` of `app_id` is kept."""
    return app_dir(app_id) / "shadows" / f"{suffix}.json"


def write_record(record: ShadowRecord) -> Path:
    """Keep `record` (durably, replacing an earlier shadow of the same name); returns the file."""
    path = record_path(record.app_id, record.suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_durably(path, record.to_json())
    return path


def read_record(app_id: str, suffix: str) -> ShadowRecord:
    """The record of shadow `suffix` of `app_id`.

    Raises:
        ShadowError: there is none (or it is unreadable).
    """
    path = record_path(app_id, suffix)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ShadowError(
            f"app {app_id} has no shadow run {suffix!r} ({path} not found); run `ethereal-kafka shadow` first"
        ) from exc
    return ShadowRecord.from_json(text, str(path))


def parse_until(text: str) -> Partitions | None:
    """`--until`: None for `now`, else `topic:partition:offset,...` as `{(topic, partition): offset}`.

    Raises:
        ShadowError: neither form.
    """
    if text.strip() == "now":
        return None
    found: Partitions = {}
    for item in text.split(","):
        parts = item.strip().rsplit(":", 2)
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            raise ShadowError(f"--until {text!r}: expected now or topic:partition:offset[,...]")
        found[(parts[0], int(parts[1]))] = int(parts[2])
    return found


@dataclass(frozen=True)
class ProductionRange:
    """`production_range`'s answer.

    Attributes:
        input_starts, input_ends: `{(topic, partition): offset}` over every query.
        epochs: Per query, `checkpoint id:epoch` of the range's last epoch.
        output_starts, output_ends: `{topic: {partition: offset}}`.
        writers: Per sink topic, the queries that write it.
    """

    input_starts: Partitions
    input_ends: Partitions
    epochs: Mapping[str, str]
    output_starts: Mapping[str, Mapping[str, int]]
    output_ends: Mapping[str, Mapping[str, int]]
    writers: Mapping[str, Sequence[str]]


def production_range(
    app_id: str, records: Sequence[EpochRecord], manifest: Manifest, until: Partitions | None
) -> ProductionRange:
    """The range of production a shadow from `manifest` up to `until` (None: the newest committed epochs) covers;
    see the module docstring. `records`: the app's history, oldest first.

    Raises:
        ShadowError: the savepoint is of another app, the history lacks what the range needs, production was rewound
            within it, queries stand at different offsets of one partition, or no committed epoch ended at `until`.
    """
    if manifest.app_id != app_id:
        raise ShadowError(
            f"savepoint {manifest.savepoint_id} is of app {manifest.app_id}, not {app_id}; a shadow compares with "
            "the app the savepoint was taken of"
        )
    starts: Partitions = {}
    ends: Partitions = {}
    epochs: dict[str, str] = {}
    out_starts: dict[str, dict[str, int]] = {}
    out_ends: dict[str, dict[str, int]] = {}
    writers: dict[str, list[str]] = {}
    for position in manifest.queries:
        query = position.name
        begin = {(str(t), int(p)): int(o) for t, p, o in position.offsets}
        committed = _committed(records, query)
        last = _last_epoch(committed, query, until, begin, app_id)
        first = _run_start(committed, last, begin, query, app_id)
        before = committed[first - 1] if first > 0 else None
        out_start: Mapping[str, Mapping[str, int]]
        if before is not None and before.output_ends:
            out_start = before.output_ends
        elif before is not None and (before.checkpoint_id, before.epoch) == (
            position.checkpoint_id,
            position.epoch,
        ):
            out_start = manifest.output_ends
        else:
            out_start = {}
        out_end = committed[last].output_ends
        if not out_start or not out_end:
            raise ShadowError(
                f"app {app_id}, query {query}: its history does not say where the output of epochs after the "
                "savepoint starts and ends (epochs or a savepoint from before output offsets were recorded); "
                "take a new savepoint and shadow from it"
            )
        for tp, offset in begin.items():
            _agree(starts, tp, offset, query, "start", app_id)
        for tp, offset in _offsets(committed[last].end_offsets).items():
            _agree(ends, tp, offset, query, "end", app_id)
        epochs[query] = f"{committed[last].checkpoint_id}:{committed[last].epoch}"
        for topic in out_end:
            if topic not in out_start:
                raise ShadowError(
                    f"app {app_id}, query {query}: where its output to {topic} stood at the savepoint is not "
                    "recorded; take a new savepoint and shadow from it"
                )
            writers.setdefault(topic, []).append(query)
            # A partition added to the topic since then was empty then.
            out_starts[topic] = {p: int(out_start[topic].get(p, 0)) for p in out_end[topic]}
            out_ends[topic] = dict(out_end[topic])
    return ProductionRange(starts, ends, epochs, out_starts, out_ends, writers)


def _committed(records: Sequence[EpochRecord], query: str) -> list[EpochRecord]:
    """The query's committed epochs in write order, a replayed epoch's last record only."""
    out: list[EpochRecord] = []
    for rec in records:
        if rec.query != query or rec.outcome != "committed":
            continue
        if out and (out[-1].checkpoint_id, out[-1].epoch) == (rec.checkpoint_id, rec.epoch):
            out[-1] = rec
        else:
            out.append(rec)
    return out


def _last_epoch(
    committed: Sequence[EpochRecord], query: str, until: Partitions | None, begin: Partitions, app_id: str
) -> int:
    """Index of the range's last epoch in `committed`."""
    if not committed:
        raise ShadowError(f"app {app_id}, query {query}: no committed epoch in its history")
    if until is None:
        return len(committed) - 1
    mine = {tp: o for tp, o in until.items() if tp in begin}
    if not mine:
        raise ShadowError(
            f"--until names none of the partitions query {query} of app {app_id} reads "
            f"({', '.join(f'{t}:{p}' for t, p in sorted(begin))})"
        )
    if mine == begin:
        raise ShadowError(
            f"--until {_render(mine)} is where the savepoint stands for query {query} of app {app_id}: nothing to "
            "shadow"
        )
    for index in range(len(committed) - 1, -1, -1):
        ended = _offsets(committed[index].end_offsets)
        if {tp: ended.get(tp) for tp in mine} == mine and set(ended) <= set(until):
            return index
    raise ShadowError(
        f"app {app_id}, query {query}: no committed epoch ended at {_render(mine)}; --until takes the end of a "
        f"committed epoch (`ethereal-kafka checkpoints {app_id}` lists them) or now"
    )


def _run_start(
    committed: Sequence[EpochRecord], last: int, begin: Partitions, query: str, app_id: str
) -> int:
    """Index of the range's first epoch: walking back from `last` while each epoch starts where the one before
    ended, the newest one that starts at the savepoint's offsets."""
    index = last
    while True:
        rec = committed[index]
        started = _offsets(rec.start_offsets)
        if started and all(started.get(tp, o) == o for tp, o in begin.items()):
            return index
        previous = committed[index - 1] if index > 0 else None
        if previous is None or not _follows(previous, rec):
            raise ShadowError(
                f"app {app_id}, query {query}: epoch {rec.epoch} (checkpoint {rec.checkpoint_id}) does not go back "
                "to the savepoint in one run: production was rewound (a replay) or its history lost epochs "
                "between; shadow up to an epoch before that (--until OFFSETS) or from a newer savepoint"
            )
        index -= 1


def _follows(previous: EpochRecord, rec: EpochRecord) -> bool:
    """`rec` starts where `previous` ended (on every partition both name)."""
    ended, started = _offsets(previous.end_offsets), _offsets(rec.start_offsets)
    return all(ended[tp] == o for tp, o in started.items() if tp in ended) and bool(started)


def _agree(into: Partitions, tp: tuple[str, int], offset: int, query: str, what: str, app_id: str) -> None:
    if into.setdefault(tp, offset) != offset:
        raise ShadowError(
            f"app {app_id}: query {query} and another query {what} {tp[0]}:{tp[1]} at different offsets "
            f"({into[tp]} and {offset}); pass --until the end of a committed epoch of both, or stop the app first"
        )


def _offsets(raw: Mapping[str, Mapping[str, Any]]) -> Partitions:
    return {(str(t), int(p)): int(o) for t, parts in raw.items() for p, o in parts.items()}


def _render(offsets: Partitions) -> str:
    return ",".join(f"{t}:{p}:{o}" for (t, p), o in sorted(offsets.items()))


def as_json(offsets: Partitions) -> dict[str, dict[str, int]]:
    """`{(topic, partition): offset}` as `{topic: {partition: offset}}`."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out
