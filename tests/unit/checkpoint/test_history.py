"""The checkpoint history: JSON round trip, write order, retention, durability and reading beside a live writer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.checkpoint.history import CheckpointHistory, EpochRecord, HistoryError, history_dir

RecordFactory = Callable[..., EpochRecord]

# Run in a child process: open the history for writing, append `argv[2]` records, say so, then append as many more
# records as lines arrive on stdin (one per line), saying so each time; it never closes the store itself.
_WRITER = """
import sys
from pathlib import Path
from ethereal_kafka.checkpoint.history import CheckpointHistory, EpochRecord

def rec(epoch):
    return EpochRecord(
        app_id="app", checkpoint_id="c" * 36, epoch=epoch, mode="shuffling",
        start_offsets={"in": {"0": epoch * 10}}, end_offsets={"in": {"0": epoch * 10 + 10}},
        records_in=10, records_out=10, tasks=1, skipped_tasks=0, started_ms=0, duration_ms=1, outcome="committed",
    )

history = CheckpointHistory("app", Path(sys.argv[1]))
epoch = 0
for _ in range(int(sys.argv[2])):
    history.record(rec(epoch))
    epoch += 1
print("written", epoch, flush=True)
for _line in sys.stdin:
    history.record(rec(epoch))
    epoch += 1
    print("written", epoch, flush=True)
"""


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the ethereal-kafka cache at the test's temporary directory."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(cache))
    return cache


@pytest.fixture
def record_factory() -> RecordFactory:
    """Build an `EpochRecord` with plausible defaults; keyword arguments override fields."""

    def make(**overrides: Any) -> EpochRecord:
        epoch = overrides.get("epoch", 0)
        fields: dict[str, Any] = {
            "app_id": "app",
            "checkpoint_id": "11111111-2222-3333-4444-555555555555",
            "epoch": epoch,
            "mode": "partition-preserving",
            "start_offsets": {"in": {"0": epoch * 5, "1": epoch * 3}},
            "end_offsets": {"in": {"0": epoch * 5 + 5, "1": epoch * 3 + 3}},
            "records_in": 8,
            "records_out": 8,
            "tasks": 2,
            "skipped_tasks": 0,
            "started_ms": 1_700_000_000_000 + epoch * 1000,
            "duration_ms": 42,
            "outcome": "committed",
        }
        fields.update(overrides)
        return EpochRecord(**fields)

    return make


def _spawn_writer(path: Path, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().split() == ["written", str(count)]
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_json_round_trip(record_factory: RecordFactory) -> None:
    rec = record_factory(outcome="failed", error="boom: broker gone", records_in=-1)
    assert EpochRecord.from_json(rec.to_json()) == rec
    assert EpochRecord.from_json(rec.to_json().encode()) == rec
    assert json.loads(rec.to_json())["end_offsets"] == {"in": {"0": 5, "1": 3}}


def test_offsets_are_copied_into_plain_string_keyed_dicts(record_factory: RecordFactory) -> None:
    ends: dict[str, dict[Any, int]] = {"in": {0: 7}}
    rec = record_factory(start_offsets={"in": {0: 2}}, end_offsets=ends)
    ends["in"][0] = 99
    assert rec.end_offsets == {"in": {"0": 7}}
    assert EpochRecord.from_json(rec.to_json()) == rec
    assert rec.offsets_advanced == 5


def test_offsets_advanced_is_none_without_start_offsets(record_factory: RecordFactory) -> None:
    assert record_factory(start_offsets={}).offsets_advanced is None
    assert record_factory(epoch=2).offsets_advanced == 8


def test_from_json_ignores_unknown_keys(record_factory: RecordFactory) -> None:
    rec = record_factory()
    newer = json.loads(rec.to_json()) | {"added_later": 1}
    assert EpochRecord.from_json(json.dumps(newer)) == rec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "history entry is not JSON"),
        ("[1, 2]", "history entry is not a JSON object"),
        ('{"app_id": "a"}', "history entry is malformed"),
    ],
)
def test_from_json_rejects_bad_entries(text: str, message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        EpochRecord.from_json(text)


def test_unknown_outcome_is_rejected(record_factory: RecordFactory) -> None:
    with pytest.raises(
        HistoryError, match="outcome must be one of committed, aborted, failed, interrupted, not 'done'"
    ):
        record_factory(outcome="done")


def test_history_dir_is_under_the_cache(home: Path) -> None:
    assert history_dir("orders") == home / "apps" / "orders" / "history"
    with CheckpointHistory("orders") as history:
        assert history.path == home / "apps" / "orders" / "history"
    assert (home / "apps" / "orders" / "history" / "CURRENT").is_file()


def test_write_order_keeps_every_attempt(record_factory: RecordFactory, tmp_path: Path) -> None:
    written = [
        record_factory(epoch=0),
        record_factory(epoch=1, outcome="failed", error="task lost"),
        record_factory(epoch=1, outcome="aborted", error="fenced"),
        record_factory(epoch=1, skipped_tasks=1),
        # a new checkpoint incarnation restarts batch ids: write order, not (checkpoint, epoch), is the order kept
        record_factory(checkpoint_id="00000000-new", epoch=0),
        record_factory(checkpoint_id="00000000-new", epoch=1),
    ]
    with CheckpointHistory("app", tmp_path / "h") as history:
        for rec in written:
            history.record(rec)
        assert history.records() == written
        assert history.records(limit=2) == written[-2:]
        assert history.records(limit=100) == written
        assert history.records(limit=0) == []


def test_last_committed(record_factory: RecordFactory, tmp_path: Path) -> None:
    with CheckpointHistory("app", tmp_path / "h") as history:
        assert history.last_committed() is None
        history.record(record_factory(epoch=0, outcome="failed", error="x"))
        assert history.last_committed() is None
        first = record_factory(epoch=0)
        history.record(first)
        other = record_factory(checkpoint_id="other", epoch=5)
        history.record(other)
        history.record(record_factory(epoch=1, outcome="aborted", error="y"))
        assert history.last_committed() == other
        assert history.last_committed(first.checkpoint_id) == first
        assert history.last_committed("unknown") is None


def test_retention_deletes_the_oldest(record_factory: RecordFactory, tmp_path: Path) -> None:
    path = tmp_path / "h"
    written = [record_factory(epoch=e) for e in range(7)]
    with CheckpointHistory("app", path, max_entries=3) as history:
        for rec in written:
            history.record(rec)
        assert history.records() == written[-3:]
    # a smaller bound on reopen trims on the next write; a reader sees exactly what the writer kept
    with CheckpointHistory("app", path, max_entries=2) as history:
        history.record(record_factory(epoch=7))
        assert [r.epoch for r in history.records()] == [6, 7]
    with CheckpointHistory("app", path, read_only=True) as reader:
        assert [r.epoch for r in reader.records()] == [6, 7]


def test_max_entries_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="max_entries must be at least 1"):
        CheckpointHistory("app", tmp_path / "h", max_entries=0)


def test_entries_survive_reopen(record_factory: RecordFactory, tmp_path: Path) -> None:
    path = tmp_path / "h"
    with CheckpointHistory("app", path) as history:
        history.record(record_factory(epoch=0))
    with CheckpointHistory("app", path) as history:
        history.record(record_factory(epoch=1))
        assert [r.epoch for r in history.records()] == [0, 1]


def test_entries_survive_sigkill_of_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "h"
    proc = _spawn_writer(path, 3)
    _kill(proc)
    with CheckpointHistory("app", path) as history:
        assert [r.epoch for r in history.records()] == [0, 1, 2]
        # sequence numbers continue after the crash, so order stays write order
        history.record(EpochRecord.from_json(history.records()[0].to_json()))
        assert [r.epoch for r in history.records()] == [0, 1, 2, 0]


def test_reader_beside_a_live_writer_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "h"
    proc = _spawn_writer(path, 3)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        with CheckpointHistory("app", path, read_only=True) as reader:
            assert [r.epoch for r in reader.records()] == [0, 1, 2]
            with pytest.raises(HistoryError, match="is another instance of this app running"):
                CheckpointHistory("app", path)
            proc.stdin.write("more\nmore\n")
            proc.stdin.flush()
            assert proc.stdout.readline().split() == ["written", "4"]
            assert proc.stdout.readline().split() == ["written", "5"]
            # an open reader catches up with the writer on every call
            assert [r.epoch for r in reader.records()] == [0, 1, 2, 3, 4]
            last = reader.last_committed()
            assert last is not None and last.epoch == 4
        with CheckpointHistory("app", path, read_only=True) as fresh:
            assert [r.epoch for r in fresh.records(limit=2)] == [3, 4]
        assert proc.poll() is None, "the reader must not disturb the writer"
    finally:
        _kill(proc)


def test_reader_without_history_names_the_path(home: Path) -> None:
    expected = home / "apps" / "nope" / "history"
    with pytest.raises(HistoryError) as info:
        CheckpointHistory("nope", read_only=True)
    assert str(info.value) == f"no checkpoint history for app 'nope' (looked in {expected})"
    assert not expected.exists(), "a reader must not create the store"


def test_reader_cannot_record(record_factory: RecordFactory, tmp_path: Path) -> None:
    path = tmp_path / "h"
    CheckpointHistory("app", path).close()
    with (
        CheckpointHistory("app", path, read_only=True) as reader,
        pytest.raises(HistoryError, match="opened read-only"),
    ):
        reader.record(record_factory())


def test_closed_history_refuses_calls(record_factory: RecordFactory, tmp_path: Path) -> None:
    history = CheckpointHistory("app", tmp_path / "h")
    history.close()
    history.close()
    with pytest.raises(HistoryError, match="is closed"):
        history.record(record_factory())
    with pytest.raises(HistoryError, match="is closed"):
        history.records()


def test_record_from_another_thread(record_factory: RecordFactory, tmp_path: Path) -> None:
    with CheckpointHistory("app", tmp_path / "h") as history:
        workers = [threading.Thread(target=history.record, args=(record_factory(epoch=e),)) for e in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert sorted(r.epoch for r in history.records()) == list(range(8))


def test_reader_detects_a_torn_view_and_gives_up_after_retries(
    record_factory: RecordFactory, tmp_path: Path
) -> None:
    from rocksdict import Options, Rdict

    path = tmp_path / "h"
    with CheckpointHistory("app", path) as history:
        for epoch in range(3):
            history.record(record_factory(epoch=epoch))
    # Lose the middle entry the way a reader racing a memtable flush can: the markers still claim [0, 3).
    raw = Rdict(str(path), Options(raw_mode=True))
    del raw[b"e:%020d" % 1]
    raw.close()
    with CheckpointHistory("app", path, read_only=True) as reader:
        assert [r.epoch for r in reader.records(limit=1)] == [2]
        with pytest.raises(HistoryError, match=r"could not read a consistent .* entry 1 missing \(found 0\)"):
            reader.records()


def test_history_log_waits_for_a_held_lock_then_keeps_its_writer_until_closed(
    record_factory: RecordFactory,
) -> None:
    from ethereal_kafka.checkpoint.history import HistoryLog

    holder = CheckpointHistory("app")  # another writer (a stopping instance) holds the lock for a moment
    releaser = threading.Timer(0.5, holder.close)
    releaser.start()
    log = HistoryLog("app", lock_wait_s=5.0)
    log.record(record_factory(epoch=0))  # waits for the lock instead of failing
    releaser.join()
    log.record(record_factory(epoch=1))
    with pytest.raises(HistoryError, match="another instance"):  # the run holds the writer between epochs
        CheckpointHistory("app")
    assert [r.epoch for r in log.records()] == [0, 1]  # readers are never locked out
    log.close()
    with CheckpointHistory("app") as again:  # and lets it go when the run ends
        assert [r.epoch for r in again.records()] == [0, 1]


def test_history_log_gives_up_after_its_wait(record_factory: RecordFactory) -> None:
    from ethereal_kafka.checkpoint.history import HistoryLog

    with CheckpointHistory("app"), pytest.raises(HistoryError, match="another instance"):
        HistoryLog("app", lock_wait_s=0.3).record(record_factory(epoch=0))


def test_outcome_detail_names_redone_and_skipped_epochs(record_factory: RecordFactory) -> None:
    assert record_factory().outcome_detail == "committed"
    assert record_factory(txn_aborts=2).outcome_detail == "aborted-and-redone"
    assert record_factory(tasks=2, skipped_tasks=2, records_out=0).outcome_detail == "skipped-on-replay"
    assert record_factory(tasks=2, skipped_tasks=1).outcome_detail == "committed"
    assert record_factory(outcome="failed", txn_aborts=1, error="x").outcome_detail == "failed"


def test_an_epoch_a_stop_interrupted_has_its_own_outcome_and_old_failed_entries_still_read(
    record_factory: RecordFactory,
) -> None:
    stopped = record_factory(outcome="interrupted", error="Job 3 cancelled part of cancelled job group")
    assert stopped.outcome_detail == "interrupted"
    assert EpochRecord.from_json(stopped.to_json()) == stopped
    old = record_factory(outcome="failed", error="Job 3 cancelled")  # how such an epoch was written before
    assert EpochRecord.from_json(old.to_json()).outcome == "failed"


def test_new_fields_round_trip_and_old_entries_still_read(record_factory: RecordFactory) -> None:
    rec = record_factory(
        query="late+totals",
        watermark_ms=1_700_000_000_000,
        commit_ms=12.5,
        txn_aborts=1,
        marker="app:c:0",
        marker_offsets={"app.ethereal-progress.q": {"app.ethereal-progress": {0: 1, 1: 1}}},
        lag={"in": {0: 3}},
        latency={"bounds": [0.1, 1.0], "counts": [1, 2, 0], "sum": 1.5},
    )
    assert EpochRecord.from_json(rec.to_json()) == rec
    assert rec.marker_offsets == {"app.ethereal-progress.q": {"app.ethereal-progress": {"0": 1, "1": 1}}}
    old = json.loads(rec.to_json())
    for key in (
        "query",
        "watermark_ms",
        "commit_ms",
        "txn_aborts",
        "marker",
        "marker_offsets",
        "lag",
        "latency",
    ):
        del old[key]
    assert EpochRecord.from_json(json.dumps(old)).query == ""


def test_entries_after_returns_what_was_written_since(tmp_path: Path, record_factory: RecordFactory) -> None:
    path = tmp_path / "history"
    with CheckpointHistory("app", path, max_entries=4) as writer:
        for epoch in range(6):
            writer.record(record_factory(epoch=epoch))
        with CheckpointHistory("app", path, read_only=True) as reader:
            kept = reader.entries_after()
            assert [(s, r.epoch) for s, r in kept] == [(2, 2), (3, 3), (4, 4), (5, 5)]
            assert [s for s, _ in reader.entries_after(3)] == [4, 5]
            assert [s for s, _ in reader.entries_after(-1, limit=1)] == [5]
            writer.record(record_factory(epoch=6))
            assert [(s, r.epoch) for s, r in reader.entries_after(5)] == [(6, 6)]
            assert reader.entries_after(6) == []
