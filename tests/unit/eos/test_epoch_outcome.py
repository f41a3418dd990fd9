"""How `EpochWriter` records an epoch attempt whose write raised: "failed", or "interrupted" when the runner was
stopping the queries (`EpochGate.interrupt`) — a stop is not a failure (history, `checkpoints`, UI, metrics).

The writer is driven without Spark: its checkpoint reads are stubbed and the write raises as Spark's does when a
query is stopped under it.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from ethereal_kafka.checkpoint.history import EpochRecord
from ethereal_kafka.connectors.kafka.offsets import Offsets
from ethereal_kafka.eos import epoch_writer
from ethereal_kafka.eos.epoch_writer import EpochWriter
from ethereal_kafka.eos.gate import EpochGate
from ethereal_kafka.eos.task_plan import EpochRanges


class FakeCoordinator:
    """What `EpochWriter._write` uses of the coordinator; `record` keeps the entries."""

    def __init__(self, gate: EpochGate) -> None:
        self.gate = gate
        self.app_id = "app"
        self.job = SimpleNamespace(delivery_guarantee="exactly-once", min_pause_between_epochs_ms=0)
        self.recorded: list[EpochRecord] = []
        self.begun: list[tuple[str, int]] = []

    def location(self, _query: str) -> str:
        return "/nowhere"

    def query_sources(self, _query: str) -> list[Any]:
        return []

    def check_owner(self) -> None:
        pass

    def begin(self, query: str, epoch: int) -> None:
        self.begun.append((query, epoch))

    def record(self, entry: EpochRecord, _query: str = "", _tasks: Any = ()) -> None:
        self.recorded.append(entry)


@pytest.fixture
def writer(monkeypatch: pytest.MonkeyPatch) -> EpochWriter:
    ends = Offsets.from_json({"in": {"0": 10}})
    starts = Offsets.from_json({"in": {"0": 0}})
    monkeypatch.setattr(epoch_writer, "sync_offset_log", lambda *_a: None)
    monkeypatch.setattr(epoch_writer, "checkpoint_id", lambda _loc: "cp-1")
    monkeypatch.setattr(epoch_writer, "epoch_watermark_ms", lambda *_a: 0)
    monkeypatch.setattr(EpochRanges, "of", classmethod(lambda cls, *_a: cls(starts, ends, (ends,))))
    w = object.__new__(EpochWriter)
    w.coordinator = FakeCoordinator(EpochGate())  # type: ignore[assignment]
    w.name = "out"
    w.query = SimpleNamespace(sinks=(), layout="partition-preserving", chain=None)  # type: ignore[assignment]
    w._last_end = 0.0
    w._task_rows = []

    def stopped_under_it(*_a: Any) -> Any:
        raise RuntimeError("Job 7 cancelled part of cancelled job group")

    monkeypatch.setattr(w, "_exactly_once", stopped_under_it)
    return w


def test_a_write_that_raises_is_recorded_failed(writer: EpochWriter) -> None:
    with pytest.raises(RuntimeError):
        writer(None, 3)  # type: ignore[arg-type]
    (entry,) = writer.coordinator.recorded  # type: ignore[attr-defined]
    assert (entry.epoch, entry.outcome, entry.outcome_detail) == (3, "failed", "failed")
    assert not writer.coordinator.gate.last()["out"].interrupted
    assert writer.coordinator.begun == [("out", 3)], "the epoch's begin was told before its write"  # type: ignore[attr-defined]


def test_a_write_the_runner_stopped_is_recorded_interrupted_not_failed(
    writer: EpochWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = writer.coordinator.gate
    writing, stopped = threading.Event(), threading.Event()

    def write_until_stopped(*_a: Any) -> Any:
        writing.set()
        stopped.wait(5)
        raise RuntimeError("Job 7 cancelled part of cancelled job group")  # what Spark raises under a stop

    monkeypatch.setattr(writer, "_exactly_once", write_until_stopped)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            writer(None, 4)  # type: ignore[arg-type]
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert writing.wait(5)
    gate.interrupt()  # the runner forces the stop (or stops the others after a failure), then stops the queries
    stopped.set()
    thread.join(5)
    assert errors, "the write still raises: Spark ends the query"
    (entry,) = writer.coordinator.recorded  # type: ignore[attr-defined]
    assert (entry.epoch, entry.outcome, entry.outcome_detail) == (4, "interrupted", "interrupted")
    assert entry.marker is None and entry.operators is None
    assert EpochRecord.from_json(entry.to_json()) == entry
    assert gate.last()["out"].interrupted
