"""Pinning global tables to epochs: the table offsets a query's source records with each epoch's end offsets.

A lookup join must see, on a replayed epoch, exactly the table it saw the first time. Spark logs a source's end
offsets before an epoch runs and hands the same offsets to the replay, so the source records the tables' end offsets
in its own offsets under keys that are not topics (`"@table/<name>": {"<partition>": <offset>}`; keys starting with
`@` are skipped by everything that reads topics from Spark's offset log). `partitions()` passes them to the read
tasks, and every row read carries them in the hidden column `__pins`; the lookup reads the table as of those offsets.

Rules (`TablePinner.pin`):
- pins only move forward: a new pin is at least the previous epoch's in every partition;
- an epoch with no new input keeps the previous pins, so table updates alone never make Spark run an epoch;
- the end offsets asked for within `ALIGN_S` of each other are reused, so two sources of one query planned in the
  same round pin the same table version (an executor's copy then never has to go back). Spark runs each source's
  reader in a Python process of its own, so the sources share them through a file in the job's source checkpoint
  folder (`<checkpoint>/sources/ethereal-kafka/table-ends-<table>.json`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ethereal_kafka.config.connectors import KafkaSourceConfig, KafkaTableConfig
from ethereal_kafka.connectors.kafka.offsets import SourceOffset
from ethereal_kafka.connectors.kafka.positions import PositionResolver

#: Prefix of the offset keys holding table pins.
PIN_PREFIX = "@table/"
#: Hidden column carrying an input row's pins (JSON text, see `encode_pins`).
PINS_COLUMN = "__pins"
#: End offsets queried this recently (seconds) are reused (see the module docstring).
ALIGN_S = 1.0

Pins = dict[str, dict[int, int]]

_RECENT: dict[tuple[str, str, str], tuple[float, dict[int, int]]] = {}
_RECENT_LOCK = threading.Lock()
_FILE_LOCK = threading.Lock()


def encode_tables(tables: Sequence[KafkaTableConfig]) -> str:
    """The `pin.tables` option of a source: the tables' settings as JSON (secrets included: the option is masked)."""
    return json.dumps([t.to_properties() for t in sorted(tables, key=lambda t: t.name)], sort_keys=True)


def decode_tables(text: str | None) -> list[KafkaTableConfig]:
    """The tables of a `pin.tables` option (empty for None).

    Raises:
        ConfigError: a table's settings are invalid.
    """
    if not text:
        return []
    return [KafkaTableConfig.from_properties(props, "pin.tables") for props in json.loads(text)]


def topics_only(offset: Mapping[str, Any]) -> SourceOffset:
    """The topic entries of a source offset (pins left out)."""
    return {t: dict(parts) for t, parts in offset.items() if not t.startswith("@")}


def pins_of(offset: Mapping[str, Any]) -> Pins:
    """The table pins in a source offset, `{table name: {partition: offset}}`."""
    return {
        t[len(PIN_PREFIX) :]: {int(p): int(o) for p, o in parts.items()}
        for t, parts in offset.items()
        if t.startswith(PIN_PREFIX)
    }


def with_pins(offset: Mapping[str, Any], pins: Pins) -> SourceOffset:
    """`offset`'s topics followed by `pins`, both in sorted order (Spark compares offsets by their JSON)."""
    out = {t: dict(parts) for t, parts in sorted(topics_only(offset).items())}
    for name in sorted(pins):
        out[f"{PIN_PREFIX}{name}"] = {str(p): int(o) for p, o in sorted(pins[name].items())}
    return out


def encode_pins(pins: Pins) -> str:
    """The `__pins` value of rows read with `pins` (canonical JSON; "" when there are none)."""
    if not pins:
        return ""
    return json.dumps({n: {str(p): o for p, o in sorted(parts.items())} for n, parts in sorted(pins.items())})


def decode_pins(text: str | None) -> Pins:
    """Inverse of `encode_pins` (empty for null or "")."""
    if not text:
        return {}
    return {n: {int(p): int(o) for p, o in parts.items()} for n, parts in json.loads(text).items()}


class TablePinner:
    """Adds table pins to a source's end offsets (driver side; one per stream reader, never pickled).

    Args:
        tables: The tables the source's rows are looked up in.
        share_dir: A folder the job's sources share (their checkpoint folder), where recent end offsets are left
            for the other sources (see the module docstring); None: shared within this process only.
    """

    def __init__(self, tables: Sequence[KafkaTableConfig], share_dir: str | None = None) -> None:
        self.tables = {t.name: t for t in tables}
        self.share_dir = Path(share_dir) / "ethereal-kafka" if share_dir else None
        self._resolvers: dict[str, PositionResolver] = {}

    def pin(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> SourceOffset:
        """`end` with the pins of the epoch it ends (see the module docstring for the rules).

        Raises:
            ConfigError: a table's topic does not exist.
            KafkaConnectionError: the table's cluster did not answer after bounded retries.
        """
        previous = pins_of(start)
        if topics_only(end) == topics_only(start):
            return with_pins(end, previous)
        pins: Pins = {}
        for name in sorted(self.tables):
            fresh = self._end_offsets(name)
            old = previous.get(name, {})
            pins[name] = {p: max(fresh.get(p, 0), old.get(p, 0)) for p in sorted({*fresh, *old})}
        return with_pins(end, pins)

    def _end_offsets(self, name: str) -> dict[int, int]:
        table = self.tables[name]
        cache_key = (table.bootstrap_servers, table.topic, table.isolation_level)
        with _RECENT_LOCK:
            found = _RECENT.get(cache_key)
            if found is not None and time.monotonic() - found[0] <= ALIGN_S:
                return dict(found[1])
        shared = self._shared(table)
        if shared is not None:
            return shared
        resolver = self._resolvers.get(name)
        if resolver is None:
            resolver = self._resolvers[name] = PositionResolver(_as_source(table))
        ends = {p: o for (_, p), o in resolver.latest(resolver.topic_partitions()).items()}
        with _RECENT_LOCK:
            _RECENT[cache_key] = (time.monotonic(), dict(ends))
        self._share(table, ends)
        return ends

    def _share_path(self, table: KafkaTableConfig) -> Path | None:
        return None if self.share_dir is None else self.share_dir / f"table-ends-{table.name}.json"

    def _shared(self, table: KafkaTableConfig) -> dict[int, int] | None:
        """End offsets another source of the job left less than `ALIGN_S` ago, if any."""
        path = self._share_path(table)
        try:
            if path is None or time.time() - path.stat().st_mtime > ALIGN_S:
                return None
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if doc.get("topic") != table.topic or doc.get("bootstrap") != table.bootstrap_servers:
            return None
        return {int(p): int(o) for p, o in doc.get("ends", {}).items()}

    def _share(self, table: KafkaTableConfig, ends: dict[int, int]) -> None:
        path = self._share_path(table)
        if path is None:
            return
        doc = {
            "topic": table.topic,
            "bootstrap": table.bootstrap_servers,
            "ends": {str(p): o for p, o in ends.items()},
        }
        with _FILE_LOCK:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(f".{os.getpid()}.partial")
                partial.write_text(json.dumps(doc), encoding="utf-8")
                os.replace(partial, path)
            except OSError:
                pass  # sharing is an optimization: each source still pins a valid table version

    def close(self) -> None:
        """Release the driver-side clients."""
        for resolver in self._resolvers.values():
            resolver.close()
        self._resolvers.clear()


def _as_source(table: KafkaTableConfig) -> KafkaSourceConfig:
    """A source configuration reading the table's topic, for the position resolver's metadata queries."""
    return KafkaSourceConfig(
        name=f"table-{table.name}",
        bootstrap_servers=table.bootstrap_servers,
        topics=(table.topic,),
        group_id=f"ethereal-kafka-table-{table.name}",
        isolation_level=table.isolation_level,
        passthrough=dict(table.passthrough),
    )


def add_pins_column(batches: Iterator[pa.RecordBatch], pins: str) -> Iterator[pa.RecordBatch]:
    """Each batch with the `__pins` column (the same `pins` text on every row); runs in the read task."""
    for batch in batches:
        yield batch.append_column(PINS_COLUMN, pa.array([pins] * batch.num_rows, pa.string()))
