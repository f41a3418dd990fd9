"""The local checkpoint history: one entry per epoch attempt of an app, kept in RocksDB (via rocksdict).

The history is for people, not for recovery: nothing in the exactly-once protocol reads it back. The coordinator
appends one `EpochRecord` per epoch attempt (committed, aborted, failed or interrupted) on the driver; `ethereal-kafka
checkpoints APP` reads it, usually while the job is still running.

Layout (raw byte keys, so RocksDB's byte order is the order below):

* `e:<seq, 20 digits>` -> one record as UTF-8 JSON. `seq` counts writes from 0, so key order is write order across
  checkpoint incarnations and across several attempts of the same epoch.
* `m:first` / `m:next` -> the oldest kept and the next free sequence number (ASCII decimals). They are written in
  the same atomic batch as the entry, so a reader can check that it sees exactly the entries `[first, next)`.

RocksDB admits one writer per database. A reader opens it as a *secondary* instance (its own scratch directory,
tailing the writer's manifest and write-ahead log), which never takes the writer's lock. A secondary (or read-only)
open that races a memtable flush can miss a whole flushed memtable without any error; the reader therefore checks
the sequence numbers it sees against `m:first`/`m:next` and re-reads when they do not match.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import Any

from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

from ethereal_kafka.connectors.kafka.offsets import Offsets, SourceOffset
from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.paths import cache_home

#: An epoch attempt's outcomes. "interrupted": a stop (SIGTERM, Ctrl-C, a `stop` event, or the other queries' stop
#: after one failed) ended the attempt while it wrote; nothing failed, and the next start replays it. Entries written
#: before "interrupted" existed recorded such an attempt as "failed".
OUTCOMES = ("committed", "aborted", "failed", "interrupted")
DEFAULT_MAX_ENTRIES = 10_000

_ENTRY_PREFIX = b"e:"
_ENTRY_END = b"e;"  # the first key after every `e:` key (";" follows ":")
_FIRST = b"m:first"
_NEXT = b"m:next"
_READ_ATTEMPTS = 6
_READ_BACKOFF_S = 0.05


class HistoryError(EtherealKafkaError):
    """The checkpoint history could not be opened, written or read.

    Raised by `CheckpointHistory` when the app has no history yet (read-only open of a missing store), when another
    process already holds the store open for writing (another instance of the same app), when an entry cannot be
    decoded, or when a reader could not get a consistent view after bounded retries. The job's exactly-once state
    does not depend on the history, so a caller may log the error and go on.
    """


@dataclass(frozen=True)
class EpochRecord:
    """The outcome of one attempt at one Spark micro-batch (epoch) of an app, as kept in the history.

    Offsets are `{topic: {"partition": offset}}`, JSON-friendly; the constructor copies them into plain dicts with
    string partition keys, so a record never aliases the caller's mutable maps and survives a JSON round trip equal.
    `started_ms` is wall-clock time for display only; no operator or recovery decision may use it.

    Attributes:
        app_id: The app the epoch belongs to.
        checkpoint_id: The Spark checkpoint incarnation (a uuid string); a new one after a checkpoint is removed.
        epoch: The Spark batch id.
        mode: How the epoch was written: "partition-preserving", "shuffling", "at-least-once" or "at-most-once".
        start_offsets: Input offsets the epoch started from (may be empty when unknown).
        end_offsets: Input offsets the epoch ended at (exclusive).
        records_in: Offsets the epoch advanced its inputs by (records plus transaction markers and aborted
            records), or -1 when unknown; `records_read` is the count of records.
        records_out: Records the epoch committed to the sinks: for a committed epoch an exactly-once figure, its
            skipped tasks counting the records an earlier attempt committed for them (that attempt, recorded
            failed or interrupted, counts none), so that it matches `operators`, which the committing attempt
            computed over the whole input; 0 for an attempt that did not commit.
        tasks: Sink tasks run.
        skipped_tasks: Tasks that found their epoch marker already committed (a replay of a committed epoch).
        started_ms: When the attempt started, epoch milliseconds (wall clock).
        duration_ms: How long the attempt took.
        outcome: "committed", "aborted", "failed" or "interrupted" (a stop ended the attempt while it wrote: not
            a failure; the next start replays the epoch). See `OUTCOMES`.
        error: One line describing the failure, for "aborted" and "failed" (for "interrupted", what the stop
            left the write with); else None.
        query: The query the epoch belongs to ("" in entries written before queries were named).
        watermark_ms: The event-time watermark the epoch ran with, as Spark logged it before running it (epoch
            milliseconds; 0 before any watermark); None when unknown.
        commit_ms: The slowest transaction commit (`send_offsets_to_transaction` + `commit_transaction`) among
            the epoch's exactly-once sink tasks; None when no task committed a transaction.
        txn_aborts: Transaction attempts of the epoch's sink tasks beyond the first: each one was aborted (or
            fenced) and redone within the epoch.
        marker: The epoch marker the epoch's offsets carry (`{app.id}:{checkpoint-id}:{epoch}`); None when unknown.
        marker_offsets: Where the marker was committed: `{consumer group: {topic: {"partition": offset}}}`.
        lag: Consumer lag per input partition when the epoch committed, `{topic: {"partition": records}}`, as
            the job's metrics last saw it (the figure of the last planned epoch); empty when unknown.
        latency: End-to-end latency of the epoch's input records as a histogram, `{"bounds": [seconds, ...],
            "counts": [n, ...], "sum": seconds}` (`counts` has one more entry than `bounds`: the overflow); None
            when the job ran without metrics.
        records_read: Records the epoch's read tasks reported reading from Kafka (poison records included;
            transaction markers and aborted records not); None when the job ran without metrics or a report is
            missing.
        run_started_ms: When the run (the start of the app) that attempted the epoch started, epoch
            milliseconds: epochs with the same value belong to one run, so a reader sees where the app was stopped
            and started again (the web UI breaks its charts there). None in entries written before it was kept.
        operators: Rows in and out of each operator of the query's stream graph in the epoch, `{node id: [in,
            out]}` (`runtime.operator_rows`; None for a figure Spark does not count separately); None when the job
            ran without metrics.
        operator: For an epoch that failed in user code, the operator whose code raised: `{"name": display name,
            "uid": stable id}` (`DataStream.name`/`.uid`); None otherwise.
        output_ends: For a committed exactly-once epoch, the high watermark of every partition of the query's sink
            topics read right after the commit, `{topic: {"partition": offset}}`: every record of this epoch and
            of the query's earlier ones lies below it, every record of its later ones at or above it (the epochs
            of one query are sequential). What `ethereal-kafka diff` cuts the production output at; empty when
            unknown (an older entry, a failed read, another guarantee).
    """

    app_id: str
    checkpoint_id: str
    epoch: int
    mode: str
    start_offsets: SourceOffset
    end_offsets: SourceOffset
    records_in: int
    records_out: int
    tasks: int
    skipped_tasks: int
    started_ms: int
    duration_ms: int
    outcome: str
    error: str | None = None
    query: str = ""
    watermark_ms: int | None = None
    commit_ms: float | None = None
    txn_aborts: int = 0
    marker: str | None = None
    marker_offsets: Mapping[str, SourceOffset] = field(default_factory=dict)
    lag: SourceOffset = field(default_factory=dict)
    latency: Mapping[str, Any] | None = None
    records_read: int | None = None
    run_started_ms: int | None = None
    operators: Mapping[str, Any] | None = None
    operator: Mapping[str, str] | None = None
    output_ends: SourceOffset = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise HistoryError(f"epoch outcome must be one of {', '.join(OUTCOMES)}, not {self.outcome!r}")
        object.__setattr__(self, "start_offsets", _plain_offsets(self.start_offsets))
        object.__setattr__(self, "end_offsets", _plain_offsets(self.end_offsets))
        object.__setattr__(self, "lag", _plain_offsets(self.lag))
        object.__setattr__(self, "output_ends", _plain_offsets(self.output_ends))
        object.__setattr__(
            self,
            "marker_offsets",
            {str(group): _plain_offsets(offsets) for group, offsets in self.marker_offsets.items()},
        )

    @property
    def outcome_detail(self) -> str:
        """The outcome as a person reads it: "committed", "aborted-and-redone" (committed after at least one of
        its transactions was aborted and redone), "skipped-on-replay" (every sink task found the epoch committed
        before: a replay that wrote nothing), or the outcome itself ("failed", "aborted", "interrupted")."""
        if self.outcome != "committed":
            return self.outcome
        if self.txn_aborts > 0:
            return "aborted-and-redone"
        if self.tasks > 0 and self.skipped_tasks >= self.tasks:
            return "skipped-on-replay"
        return "committed"

    @property
    def offsets_advanced(self) -> int | None:
        """Return the sum of `end - start` over partitions with both offsets, or None when no partition has both."""
        advanced = [
            end - self.start_offsets[topic][p]
            for topic, parts in self.end_offsets.items()
            for p, end in parts.items()
            if p in self.start_offsets.get(topic, {})
        ]
        return sum(advanced) if advanced else None

    def to_json(self) -> str:
        """Return the record as one line of JSON (keys sorted); `from_json` reads it back equal."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> EpochRecord:
        """Parse a record written by `to_json`.

        Keys this version does not know are ignored, so an older CLI can read a newer writer's history.

        Raises:
            HistoryError: The text is not a JSON object with every required field of the right kind.
        """
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise HistoryError(f"history entry is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise HistoryError(f"history entry is not a JSON object: {str(text)[:80]!r}")
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in raw.items() if k in known})
        except (TypeError, ValueError, AttributeError) as exc:
            raise HistoryError(f"history entry is malformed: {exc}") from exc


def _plain_offsets(offsets: Mapping[Any, Any]) -> SourceOffset:
    """The JSON form of offsets given as `Offsets` or already in (a variant of) that form."""
    if isinstance(offsets, Offsets):
        return offsets.to_json()
    return Offsets.from_json(offsets).to_json()


def history_dir(app_id: str) -> Path:
    """Return where the history of `app_id` lives by default: `cache_home() / "apps" / app_id / "history"`."""
    return cache_home() / "apps" / app_id / "history"


def _seq_key(seq: int) -> bytes:
    return _ENTRY_PREFIX + b"%020d" % seq


class _TornReadError(Exception):
    """A reader's view is missing entries between `m:first` and `m:next` (it raced a flush); read again."""


class CheckpointHistory:
    """Append-only epoch history of one app, in RocksDB via rocksdict.

    One process writes (the job's driver, through the checkpoint coordinator); any number of processes read with
    `read_only=True` at the same time, without blocking the writer. Entries come back in write order, oldest first.
    At most `max_entries` entries are kept; each write past that deletes the oldest, in the same atomic batch.

    Use as a context manager, or call `close()`; a closed history raises `HistoryError` on every call.
    `record` may be called from any thread (Spark runs `foreachBatch` callbacks off the main thread).
    """

    def __init__(
        self,
        app_id: str,
        path: Path | None = None,
        read_only: bool = False,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        """Open (for writing: create if missing) the history of `app_id`.

        Args:
            app_id: The app whose history this is.
            path: The store directory; default `history_dir(app_id)`.
            read_only: Open as a reader that tolerates a live writer in another process. Readers cannot `record`.
            max_entries: Entries kept by a writer; older ones are deleted on write. Ignored by readers.

        Raises:
            HistoryError: A reader found no history at `path`; a writer found it locked by another process or
                could not create it; or `max_entries` is not positive.
        """
        if max_entries < 1:
            raise HistoryError(f"max_entries must be at least 1, not {max_entries}")
        self.app_id = app_id
        self.path = Path(path) if path is not None else history_dir(app_id)
        self.read_only = read_only
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._scratch: Path | None = None
        self._closed = False
        if read_only:
            if not (self.path / "CURRENT").is_file():
                raise HistoryError(f"no checkpoint history for app {app_id!r} (looked in {self.path})")
            self._db = self._open_secondary()
            self._first = self._next = 0
        else:
            self._db = self._open_writer()
            first, nxt = self._meta(self._db.iter())
            self._first, self._next = first, nxt
            self._sync = WriteOptions()
            self._sync.sync = True

    def _open_writer(self) -> Rdict:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_keep_log_file_num(2)
        options.set_max_log_file_size(1 << 20)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            return Rdict(str(self.path), options)
        except Exception as exc:  # rocksdict raises bare `Exception` for every RocksDB status
            hint = "; is another instance of this app running?" if "lock" in str(exc).lower() else ""
            raise HistoryError(
                f"cannot open the checkpoint history of app {self.app_id!r} at {self.path} for writing: "
                f"{_one_line(exc)}{hint}"
            ) from exc

    def _open_secondary(self) -> Rdict:
        # A secondary instance needs a directory of its own for its info log; it is scratch, removed on close.
        self._scratch = Path(tempfile.mkdtemp(prefix="ethereal-kafka-history-"))
        options = Options(raw_mode=True)
        options.set_keep_log_file_num(1)
        options.set_max_open_files(-1)  # secondaries must keep every table file open (RocksDB requirement)
        try:
            return Rdict(str(self.path), options, access_type=AccessType.secondary(str(self._scratch)))
        except Exception as exc:
            self._drop_scratch()
            raise HistoryError(
                f"cannot read the checkpoint history of app {self.app_id!r} at {self.path}: {_one_line(exc)}"
            ) from exc

    def _drop_scratch(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> CheckpointHistory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the store (a writer's entries are already durable). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._db.close()
            finally:
                self._drop_scratch()

    def record(self, rec: EpochRecord) -> None:
        """Append one epoch attempt; it is on disk (WAL fsynced) when this returns.

        Called by the checkpoint coordinator on the driver after each epoch attempt, whatever its outcome. Every
        call adds a new entry, so several attempts of the same epoch are all kept, in call order.

        Raises:
            HistoryError: The history is read-only or closed, or RocksDB refused the write.
        """
        if self.read_only:
            raise HistoryError(f"the checkpoint history of app {self.app_id!r} was opened read-only")
        payload = rec.to_json().encode()
        with self._lock:
            self._check_open()
            seq = self._next
            first = max(self._first, seq + 1 - self.max_entries)
            batch = WriteBatch(raw_mode=True)
            batch.put(_seq_key(seq), payload)
            for old in range(self._first, first):
                batch.delete(_seq_key(old))
            batch.put(_FIRST, b"%d" % first)
            batch.put(_NEXT, b"%d" % (seq + 1))
            try:
                self._db.write(batch, self._sync)
            except Exception as exc:
                raise HistoryError(
                    f"cannot write the checkpoint history of app {self.app_id!r} at {self.path}: "
                    f"{_one_line(exc)}"
                ) from exc
            self._first, self._next = first, seq + 1

    def records(self, limit: int | None = None) -> list[EpochRecord]:
        """Return the kept entries in write order, oldest first; with `limit`, only the newest `limit` of them.

        A reader sees every entry whose `record` call had returned before this call began.

        Raises:
            HistoryError: Closed, an entry is undecodable, or (reader) no consistent view after bounded retries.
        """
        if limit is not None and limit <= 0:
            return []
        newest_first = self._read(lambda entries: itertools.islice(entries, limit))
        return newest_first[::-1]

    def entries_after(self, after: int = -1, limit: int | None = None) -> list[tuple[int, EpochRecord]]:
        """Return `(seq, record)` of the kept entries written after sequence number `after`, oldest first; with
        `limit`, only the newest `limit` of them.

        `seq` numbers entries in write order from 0 and never repeats, so a reader that polls with the last `seq`
        it saw gets exactly the entries written since (the web UI's timeline does).

        Raises:
            HistoryError: As for `records`.
        """
        if limit is not None and limit <= 0:
            return []
        newest_first = self._read(
            lambda entries: itertools.islice(itertools.takewhile(lambda e: e[0] > after, entries), limit),
            with_seq=True,
        )
        return newest_first[::-1]

    def last_committed(self, checkpoint_id: str | None = None) -> EpochRecord | None:
        """Return the newest entry with outcome "committed" (of `checkpoint_id`, when given), or None.

        Raises:
            HistoryError: As for `records`.
        """

        def newest(entries: Iterator[EpochRecord]) -> Iterator[EpochRecord]:
            for rec in entries:
                if rec.outcome == "committed" and checkpoint_id in (None, rec.checkpoint_id):
                    yield rec
                    return

        found = self._read(newest)
        return found[0] if found else None

    def _read(self, pick: Callable[[Iterator[Any]], Iterable[Any]], with_seq: bool = False) -> list[Any]:
        """Run `pick` over the entries newest first (`(seq, record)` pairs `with_seq`), in one consistent view;
        readers retry torn views."""
        with self._lock:
            self._check_open()
            if not self.read_only:
                return list(pick(self._newest_first(self._db.iter(), with_seq)))
            error: Exception | None = None
            for attempt in range(_READ_ATTEMPTS):
                if attempt:
                    time.sleep(_READ_BACKOFF_S * attempt)
                try:
                    self._db.try_catch_up_with_primary()
                    return list(pick(self._newest_first(self._db.iter(), with_seq)))
                except HistoryError:
                    raise
                except Exception as exc:  # a torn view, or a file the writer removed under us
                    error = exc
                    self._reopen()
            raise HistoryError(
                f"could not read a consistent checkpoint history of app {self.app_id!r} at {self.path} "
                f"after {_READ_ATTEMPTS} attempts: {_one_line(error)}"
            ) from error

    def _reopen(self) -> None:
        with contextlib.suppress(Exception):  # already unusable; the new instance replaces it
            self._db.close()
        self._drop_scratch()
        self._db = self._open_secondary()

    def _newest_first(self, it: Any, with_seq: bool = False) -> Iterator[Any]:
        """Yield entries (`(seq, entry)` pairs `with_seq`) newest first from one RocksDB iterator (one implicit
        snapshot).

        Raises `_TornReadError` when the sequence numbers seen are not exactly `next-1, next-2, ... first`.
        """
        first, nxt = self._meta(it)
        expected = nxt - 1
        it.seek_for_prev(_ENTRY_END)
        while expected >= first:
            if not it.valid() or not it.key().startswith(_ENTRY_PREFIX):
                raise _TornReadError(f"entries {first}..{expected} missing")
            seq = int(it.key()[len(_ENTRY_PREFIX) :])
            if seq != expected:
                raise _TornReadError(f"entry {expected} missing (found {seq})")
            rec = EpochRecord.from_json(it.value())
            yield (seq, rec) if with_seq else rec
            expected -= 1
            it.prev()

    @staticmethod
    def _meta(it: Any) -> tuple[int, int]:
        values = []
        for key in (_FIRST, _NEXT):
            it.seek(key)
            values.append(int(it.value()) if it.valid() and it.key() == key else 0)
        return values[0], values[1]

    def _check_open(self) -> None:
        if self._closed:
            raise HistoryError(f"the checkpoint history of app {self.app_id!r} is closed")


def _one_line(exc: BaseException | None) -> str:
    return " ".join(str(exc).split()) if exc is not None else "unknown error"


class HistoryLog:
    """The coordinator's view of the history: the store is opened for writing at the first record and kept open
    until `close()` (the end of the run), so an epoch costs one append, not an open, a flush and a close.

    One instance of an app runs at a time (a second start is refused; a takeover waits for the first to stop), so
    holding RocksDB's writer lock for the run locks nobody out; readers (`ethereal-kafka checkpoints`, the web UI)
    open the store as secondaries and never need it. A lock still held by a stopping instance is waited for, up to
    `lock_wait_s`.
    """

    def __init__(self, app_id: str, path: Path | None = None, lock_wait_s: float = 10.0) -> None:
        self.app_id = app_id
        self.path = path
        self.lock_wait_s = lock_wait_s
        self._writer: CheckpointHistory | None = None
        self._lock = threading.Lock()

    def record(self, rec: EpochRecord) -> None:
        """Append `rec` durably (thread-safe: the queries of a job record from their own threads).

        Raises:
            HistoryError: the store stayed locked for `lock_wait_s`, or could not be written.
        """
        with self._lock:
            if self._writer is None:
                self._writer = self._open()
            try:
                self._writer.record(rec)
            except HistoryError:
                self._close_writer()
                raise

    def _open(self) -> CheckpointHistory:
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                return CheckpointHistory(self.app_id, self.path)
            except HistoryError as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        """Close the store (idempotent); a later `record` opens it again."""
        with self._lock:
            self._close_writer()

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def records(self, limit: int | None = None) -> list[EpochRecord]:
        """The recorded epochs, oldest first (read without taking the writer's lock)."""
        with CheckpointHistory(self.app_id, self.path, read_only=True) as history:
            return history.records(limit)
