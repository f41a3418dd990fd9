"""Global tables on executors: a compacted topic copied into RocksDB (rocksdict) and read as of pinned offsets.

A lookup join asks `table_store(spec)` for this Python worker's copy of a table, brings it to the epoch's pins with
`sync(pins)` and reads rows with `lookup(keys)`. The copy then holds, for every key, the value of its last record
below the pinned offset of its partition (a record with a null value, a tombstone, deletes the key), which is what a
replayed epoch — pinned to the same offsets — sees again.

Costs and rules:
- **One copy per Python worker process**: RocksDB lets one process write a database, so each worker keeps its own,
  in a *slot* folder under `store.dir` (default `<tmp>/ethereal-kafka/tables/<app.id>/<table>/slot-<n>`) that it
  locks by opening it. A worker that starts later reuses a free slot and only reads what the slot has not seen;
  there are never more slots than workers that ran at the same time. Disk: about the table's compacted size per
  slot. Memory: RocksDB's write buffers (2 x 8 MiB) and block cache (16 MiB) per open copy, plus the Python worker.
- **Forward only**: pins move forward within a checkpoint, so a copy only reads on. A copy ahead of the pins (after
  a checkpoint reset, or a replay from an older epoch) is destroyed and rebuilt from the start of the topic.
- **Compaction**: a rebuild reads what the topic still holds; records compacted away below a pin are gone. Keep
  `min.compaction.lag.ms` on the table topic above how far back a replay may go.
- Positions are stored in the same write batch as the rows they cover, so a crashed worker leaves a consistent copy.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import logging
import os
import pickle
import shutil
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from rocksdict import Options, Rdict, WriteBatch

from ethereal_kafka.config.connectors import KafkaTableConfig
from ethereal_kafka.connectors.kafka.clients import consumer_config
from ethereal_kafka.connectors.kafka.range_reader import messages_to_batch, read_messages
from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.serde import SerdeSpec, build_codec, pin_schema

log = logging.getLogger(__name__)

_ROW = b"r"
_POSITION = b"\x00pos/"
_FINGERPRINT = b"\x00fingerprint"
_MAX_SLOTS = 64


class TableStoreError(EtherealKafkaError):
    """A table copy could not be opened or brought to its pins (no free slot, RocksDB failure, a poison record
    under `on.error=fail`). Raised in a Spark task: the epoch fails and is retried from the same offsets."""


@dataclass(frozen=True)
class TableSpec:
    """What an executor needs to keep a copy of one table (picklable; built on the driver).

    Attributes:
        config: The table connector.
        key: The key's serde, schema pinned.
        value: The value's serde, schema pinned.
        app_id: The job's app id (names the default store folder).
    """

    config: KafkaTableConfig
    key: SerdeSpec
    value: SerdeSpec
    app_id: str

    @classmethod
    def from_config(cls, config: KafkaTableConfig, app_id: str) -> TableSpec:
        """Resolve the table's serde specs (may read `.avsc` files or ask the registry). Driver side.

        Raises:
            ConfigError: invalid key/value settings.
        """
        key = pin_schema(SerdeSpec.from_settings(config, "key"))
        value = pin_schema(SerdeSpec.from_settings(config, "value"))
        return cls(config, key, value, app_id)

    def row_type(self) -> pa.StructType:
        """The fields of a table row: the value's fields (json/avro), or one field `value` (string/bytes)."""
        arrow = build_codec(self.value).arrow_type()
        if pa.types.is_struct(arrow):
            return arrow
        return pa.struct([pa.field("value", pa.string() if self.value.format == "string" else pa.binary())])

    def key_fields(self) -> tuple[str, ...]:
        """The key's field names for json/avro keys (empty for string/bytes keys)."""
        arrow = build_codec(self.key).arrow_type()
        return tuple(f.name for f in arrow) if pa.types.is_struct(arrow) else ()

    def fingerprint(self) -> str:
        """What a stored copy must have been built with to be reused (topic, cluster, formats, schemas)."""
        props = {k: v for k, v in self.config.to_properties().items() if k != "store.dir"}
        text = json.dumps([props, self.key.schema_text, self.value.schema_text], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def folder(self) -> Path:
        """The folder holding this table's slots (resolved on the executor: its own temp dir)."""
        root = self.config.store_dir or str(
            Path(tempfile.gettempdir()) / "ethereal-kafka" / "tables" / self.app_id
        )
        return Path(root) / self.config.name


def lookup_key(value: Any, fields: Sequence[str] = ()) -> bytes | None:
    """The canonical bytes of a key, the same for a table record's decoded key and an element's lookup key.

    bytes stay as they are; text is UTF-8; numbers and booleans are their decimal/`true`/`false` text (so an element
    field `42` finds the string key "42"); a key with several fields is the JSON list of its values in `fields`
    order (a dict is read by those names); a one-field json/avro key is its field's value. None: no key.
    """
    if value is None:
        return None
    if isinstance(value, dict):
        names = fields or tuple(value)
        value = [value.get(n) for n in names]
    if isinstance(value, list | tuple):
        if len(value) == 1:
            return lookup_key(value[0])
        parts = [None if v is None else _text(v) for v in value]
        return json.dumps(parts, separators=(",", ":")).encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return _text(value).encode()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    return str(value)


class TableStore:
    """This worker's RocksDB copy of one table. Not thread-safe: a Python worker runs one task at a time.

    Lifecycle: `table_store(spec)` opens it on first use; it stays open for the worker's life (`close()` for tests).
    """

    def __init__(self, spec: TableSpec) -> None:
        """Take the first free slot of the table's folder (reusing what it holds when its fingerprint matches).

        Raises:
            TableStoreError: every slot is locked by another live worker, or RocksDB failed.
        """
        self.spec = spec
        self.config = spec.config
        self.path, self.db, self._slot_lock = _open_slot(spec.folder())
        self._key_codec = build_codec(spec.key)
        self._value_codec = build_codec(spec.value)
        self._key_fields = spec.key_fields()
        self._row_is_struct = pa.types.is_struct(self._value_codec.arrow_type())
        if self.db.get(_FINGERPRINT) != spec.fingerprint().encode():
            self._reset("its settings changed" if self.db.get(_FINGERPRINT) else "it is new")
        self.positions = self._read_positions()

    # -- reading the topic ---------------------------------------------------------------------------------------
    def sync(self, pins: Mapping[int, int]) -> None:
        """Bring the copy to `pins` (`{partition: offset}`): afterwards it reflects every record below them.

        Reads forward from the stored positions; rebuilds from the beginning when the copy is ahead of a pin.

        Raises:
            TableStoreError: a poison record under `on.error=fail`, or RocksDB failed.
            KafkaConnectionError: the topic could not be read up to a pin within `read.timeout.ms`.
        """
        ahead = {p: o for p, o in self.positions.items() if o > pins.get(p, 0)}
        if ahead:
            self._reset(f"it is ahead of the pinned offsets ({ahead} > {dict(pins)})")
            self.positions = {}
        for partition, until in sorted(pins.items()):
            start = self.positions.get(partition, 0)
            if until > start:
                self._read(partition, start, until)

    def _read(self, partition: int, start: int, until: int) -> None:
        conf = consumer_config(
            self.config.bootstrap_servers,
            f"ethereal-kafka-table-{self.config.name}",
            self.config.isolation_level,
            self.config.passthrough,
        )
        chunks = read_messages(
            conf,
            self.config.topic,
            partition,
            start,
            until,
            self.config.batch_size,
            self.config.read_timeout_ms,
        )
        for chunk in chunks:
            batch = messages_to_batch(chunk)
            last = int(batch.column("offset")[-1].as_py())
            self._apply(batch, partition, last + 1)
        # Aborted records and transaction markers leave gaps: the position is the pin, not the last record + 1.
        self._write(WriteBatch(raw_mode=True), partition, until)

    def _apply(self, batch: pa.RecordBatch, partition: int, position: int) -> None:
        n = batch.num_rows
        topics = [self.config.topic] * n
        parts = [partition] * n
        offsets = batch.column("offset").to_pylist()
        keys = self._key_codec.decode(batch.column("key"), topics, parts, offsets)
        values = self._value_codec.decode(batch.column("value"), topics, parts, offsets)
        raw_values = batch.column("value").to_pylist()
        decoded_keys = keys.values.to_pylist()
        decoded_values = values.values.to_pylist()
        failed = {**values.errors, **keys.errors}
        if failed and self.config.on_error == "fail":
            row = min(failed)
            raise TableStoreError(
                f"table {self.config.name}: record {self.config.topic}[{partition}]@{offsets[row]} does not "
                f"decode ({failed[row]}); set on.error=skip on the table to ignore such records"
            ) from failed[row]
        writes = WriteBatch(raw_mode=True)
        for i in range(n):
            if i in failed:
                continue
            key = lookup_key(decoded_keys[i], self._key_fields)
            if key is None:
                continue
            if raw_values[i] is None:
                writes.delete(_ROW + key)
            else:
                fields = decoded_values[i] if self._row_is_struct else {"value": decoded_values[i]}
                writes.put(_ROW + key, pickle.dumps(fields, protocol=5))
        self._write(writes, partition, position)

    def _write(self, writes: WriteBatch, partition: int, position: int) -> None:
        writes.put(_POSITION + str(partition).encode(), str(position).encode())
        try:
            self.db.write(writes)
        except Exception as exc:  # rocksdict raises bare `Exception` for every RocksDB status
            raise TableStoreError(f"table {self.config.name}: writing {self.path} failed: {exc}") from exc
        self.positions[partition] = position

    # -- lookups -------------------------------------------------------------------------------------------------
    def lookup(self, keys: Iterable[bytes | None]) -> list[dict[str, Any] | None]:
        """The row of each key (None: no row, or a None key), as of the last `sync`."""
        out: list[dict[str, Any] | None] = []
        for key in keys:
            raw = None if key is None else self.db.get(_ROW + key)
            out.append(None if raw is None else pickle.loads(raw))
        return out

    # -- housekeeping --------------------------------------------------------------------------------------------
    def _read_positions(self) -> dict[int, int]:
        out = {}
        for key, value in self.db.items(from_key=_POSITION):
            raw = bytes(key)  # type: ignore[arg-type]
            if not raw.startswith(_POSITION):
                break
            out[int(raw[len(_POSITION) :])] = int(value)
        return out

    def _reset(self, why: str) -> None:
        # The slot's file lock stays held: RocksDB's own lock is free between close and reopen.
        log.info("table %s: (re)building the copy in %s: %s", self.config.name, self.path, why)
        self.db.close()
        Rdict.destroy(str(self.path), _options())
        self.db = Rdict(str(self.path), _options())
        self.db.put(_FINGERPRINT, self.spec.fingerprint().encode())
        self.positions = {}

    def close(self) -> None:
        """Close the database and free the slot for another worker."""
        self.db.close()
        os.close(self._slot_lock)


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_write_buffer_size(8 << 20)
    options.set_max_write_buffer_number(2)
    options.optimize_for_point_lookup(16)
    options.set_keep_log_file_num(2)
    options.set_max_log_file_size(1 << 20)
    return options


def _open_slot(folder: Path) -> tuple[Path, Rdict, int]:
    """Open the first slot under `folder` that no other worker holds; return it with its held lock's descriptor.

    A slot is owned through `slot-N.lock` (flock, released by the kernel when the process dies), not RocksDB's own
    lock, which a rebuild gives up between closing and destroying the database.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(_MAX_SLOTS):
        path = folder / f"slot-{index}"
        lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            continue
        try:
            return path, Rdict(str(path), _options()), lock
        except Exception as exc:  # rocksdict raises bare `Exception` for every RocksDB status
            os.close(lock)
            raise TableStoreError(f"cannot open the table copy {path}: {exc}") from exc
    raise TableStoreError(f"every table slot under {folder} is in use by another worker ({_MAX_SLOTS})")


_STORES: dict[str, TableStore] = {}
_LOCK = threading.Lock()


def table_store(spec: TableSpec) -> TableStore:
    """This worker's copy of `spec`'s table, opened on first use and kept for the worker's life."""
    key = f"{spec.folder()}|{spec.fingerprint()}"
    with _LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = TableStore(spec)
        return store


def drop_stores(remove_files: bool = False) -> None:
    """Close every open copy of this process (tests; a worker never needs it), optionally deleting the folders."""
    with _LOCK:
        stores = list(_STORES.values())
        _STORES.clear()
    for store in stores:
        store.close()
        if remove_files:
            shutil.rmtree(store.path, ignore_errors=True)
