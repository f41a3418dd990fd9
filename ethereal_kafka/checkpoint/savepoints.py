"""Savepoints on disk: a self-contained, versioned copy of an app's position (per query) and operator state, and
the rules that make one whole or absent.

A savepoint is a folder `sp-<UTC time>-<8 hex>` under the job's savepoint location (`<checkpoint.location>.savepoints`
unless `savepoint.location` says otherwise; outside the checkpoint root, which a replay or restore moves aside):

    _manifest.json                      # `Manifest`, written last
    operators/<uid, escaped>/part-*.parquet

Each operator's state is one table in an open format (Parquet), keyed by the operator's stable id (its `.uid()`),
independent of Spark's checkpoint layout and of the shuffle partition count: one row per state entry, `__key` (the
operator's key), `var` (the state variable: `u_<descriptor>` for user state, the framework's own names for its
accumulators and timer books, `plan.operators.base.TIMERS_VAR` for registered timers), `map_key` (map entries; a key
of several fields, as a namespaced map's, is each field as a 4-byte big-endian length and its bytes), `value` (the entry as the
operator pickled it; a list is one row holding the pickled list of its elements, so its order survives), `ordinal`
(a timer's time, ms).

All or nothing: the folder is written as `.sp-<id>.tmp`, every file flushed, the manifest written last with
`complete: true`, then renamed to `sp-<id>` and the parent flushed (`seal`). A reader (`read_manifest`,
`list_savepoints`) accepts only a sealed folder whose manifest parses, says complete, and whose files match the
sizes and SHA-256 it records. A kill at any moment leaves a complete savepoint or none (a leftover `.tmp` folder is
never listed, and the next savepoint removes it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.faults import savepoint_step
from ethereal_kafka.paths import fsync_path, write_durably

FORMAT = "ethereal-kafka-savepoint"
VERSION = 1
MANIFEST = "_manifest.json"
PREFIX = "sp-"


class SavepointError(EtherealKafkaError):
    """A savepoint cannot be taken, read or restored (the message names the savepoint or app and why)."""


@dataclass(frozen=True)
class OperatorState:
    """One stateful operator's state in a savepoint.

    Attributes:
        uid: The operator's stable id.
        kind: Its kind as `plan.describe` names it (`rolling`, `process`, ...).
        query: The query that ran it.
        operator_id: Spark's id of it in the query's checkpoint.
        variables: `{state variable: Spark's kind of it (ValueState, ListState, MapState, TimerState)}`.
        folder: Its table's folder, relative to the savepoint.
        rows: Rows in the table.
        files: `{file relative to the savepoint: [size, sha256 hex]}`.
    """

    uid: str
    kind: str
    query: str
    operator_id: int
    variables: Mapping[str, str]
    folder: str
    rows: int
    files: Mapping[str, Sequence[Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class QueryPosition:
    """Where one query of the app stood: the last epoch it committed, and what that epoch ended at.

    Attributes:
        name: The query.
        checkpoint_id: Spark's id of the query's checkpoint (its incarnation).
        epoch: The last epoch Spark and Kafka both committed.
        watermark_ms: The watermark that epoch ran with (None without one).
        offsets: `[[topic, partition, offset], ...]`: where the query reads on from.
        next_watermark_ms: The watermark Spark computed after the epoch (what the next epoch runs with).
        event_time_max: Per carry key of a watermark the query carried across restarts, the largest event time its
            input read through the epoch (µs; `connectors.event_time`).
    """

    name: str
    checkpoint_id: str
    epoch: int
    watermark_ms: int | None
    offsets: Sequence[Sequence[Any]]
    next_watermark_ms: int | None = None
    event_time_max: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Manifest:
    """What `_manifest.json` holds (see the module docstring).

    `output_ends`: the high watermark of every partition of the app's sink topics when the savepoint was taken,
    `{topic: {partition: offset}}` (the app stopped: its output up to the savepoint lies below, everything it writes
    after at or above); where `ethereal-kafka diff` starts the production output of a shadow run's range. Empty in
    savepoints taken before it was kept.
    """

    savepoint_id: str
    app_id: str
    created_ms: int
    job_file: str
    queries: Sequence[QueryPosition]
    operators: Sequence[OperatorState]
    output_ends: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    format: str = FORMAT
    version: int = VERSION
    complete: bool = False

    def to_json(self) -> str:
        """The manifest as JSON."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        """Parse `to_json` output.

        Raises:
            SavepointError: not a manifest of a format and version this code reads (`where` names the file).
        """
        try:
            raw = json.loads(text)
            if raw.get("format") != FORMAT or int(raw.get("version", 0)) != VERSION:
                raise SavepointError(
                    f"{where}: not an ethereal-kafka savepoint of version {VERSION} (format "
                    f"{raw.get('format')!r}, version {raw.get('version')!r})"
                )
            return cls(
                savepoint_id=str(raw["savepoint_id"]),
                app_id=str(raw["app_id"]),
                created_ms=int(raw["created_ms"]),
                job_file=str(raw["job_file"]),
                queries=tuple(QueryPosition(**q) for q in raw["queries"]),
                operators=tuple(OperatorState(**o) for o in raw["operators"]),
                output_ends={
                    str(t): {str(p): int(o) for p, o in parts.items()}
                    for t, parts in raw.get("output_ends", {}).items()
                },
                complete=bool(raw.get("complete")),
            )
        except SavepointError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SavepointError(f"{where}: malformed savepoint manifest ({exc})") from exc

    def agreed_offsets(self) -> tuple[list[tuple[str, int, int]], dict[str, list[tuple[str, int, int]]]]:
        """Every input partition's offset where the queries that read it agree, `(topic, partition, offset)`, sorted,
        each once; and, when some partition is read up to different offsets by two queries, every query's own
        offsets (`{query: [(topic, partition, offset), ...]}`, else empty): a restore starts each query where it
        stood."""
        found: dict[tuple[str, int], set[int]] = {}
        for query in self.queries:
            for topic, partition, offset in query.offsets:
                found.setdefault((str(topic), int(partition)), set()).add(int(offset))
        agreed = sorted((t, p, next(iter(o))) for (t, p), o in found.items() if len(o) == 1)
        if len(agreed) == len(found):
            return agreed, {}
        own = {q.name: sorted((str(t), int(p), int(o)) for t, p, o in q.offsets) for q in self.queries}
        return agreed, own


def default_location(checkpoint_location: str) -> str:
    """Where an app's savepoints go unless the job says: beside its checkpoint root, `<root>.savepoints`."""
    return f"{checkpoint_location.rstrip('/')}.savepoints"


def new_id(now_ms: int | None = None) -> str:
    """A savepoint id: UTC time and 8 random hex digits (sortable by time)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now / 1000))}-{secrets.token_hex(4)}"


def begin(location: Path, savepoint_id: str) -> Path:
    """A new scratch folder for savepoint `savepoint_id` under `location` (leftover scratch folders of savepoints
    that did not finish are removed first); returns it."""
    location.mkdir(parents=True, exist_ok=True)
    for leftover in location.glob(f".{PREFIX}*.tmp"):
        shutil.rmtree(leftover, ignore_errors=True)
    scratch = location / f".{PREFIX}{savepoint_id}.tmp"
    scratch.mkdir()
    return scratch


def operator_folder(uid: str) -> str:
    """The folder of an operator's table, relative to the savepoint (the uid escaped for a file name)."""
    safe = "".join(c if c.isalnum() or c in "._-" else f"%{ord(c):02X}" for c in uid)
    return f"operators/{safe}"


def file_digests(root: Path, folder: str) -> dict[str, list[Any]]:
    """`{file relative to root: [size, sha256 hex]}` of the data files in `root/folder` (Spark's marker and checksum
    files left out)."""
    out: dict[str, list[Any]] = {}
    for path in sorted((root / folder).rglob("*")):
        if path.is_file() and not path.name.startswith((".", "_")):
            out[str(path.relative_to(root))] = [path.stat().st_size, _sha256(path)]
    return out


def seal(scratch: Path, manifest: Manifest) -> Path:
    """Make `scratch` the savepoint: every file flushed, the manifest written with `complete`, the folder renamed to
    `sp-<id>` and its parent flushed. Returns the savepoint's path."""
    for path in scratch.rglob("*"):
        if path.is_file():
            fsync_path(path)
    savepoint_step("files")
    write_durably(scratch / MANIFEST, dataclasses.replace(manifest, complete=True).to_json())
    for folder in [*(p for p in scratch.rglob("*") if p.is_dir()), scratch]:
        fsync_path(folder)
    savepoint_step("manifest")
    final = scratch.parent / f"{PREFIX}{manifest.savepoint_id}"
    os.rename(scratch, final)
    fsync_path(scratch.parent)
    savepoint_step("sealed")
    return final


def read_manifest(path: Path) -> Manifest:
    """The manifest of the savepoint at `path`, checked whole: sealed, complete, every file present with the size and
    SHA-256 it records.

    Raises:
        SavepointError: `path` is not a whole savepoint (the message says what is wrong).
    """
    where = path / MANIFEST
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise SavepointError(f"{path}: not a savepoint ({where}: {exc.strerror})") from exc
    manifest = Manifest.from_json(text, str(where))
    if not manifest.complete or not path.name.startswith(PREFIX):
        raise SavepointError(f"{path}: an unfinished savepoint (take it again)")
    for operator in manifest.operators:
        for name, (size, digest) in operator.files.items():
            file = path / name
            if not file.is_file() or file.stat().st_size != size or _sha256(file) != digest:
                raise SavepointError(f"{path}: {name} of operator {operator.uid} is missing or damaged")
    return manifest


def list_savepoints(location: Path) -> list[tuple[Path, Manifest | SavepointError]]:
    """The savepoints under `location`, oldest first, each with its manifest or why it cannot be used."""
    found: list[tuple[Path, Manifest | SavepointError]] = []
    if not location.is_dir():
        return found
    for path in sorted(p for p in location.iterdir() if p.name.startswith(PREFIX) and p.is_dir()):
        try:
            found.append((path, read_manifest(path)))
        except SavepointError as exc:
            found.append((path, exc))
    return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
