"""The run lifecycle against stand-in queries: graceful stop waits for the epoch in flight, timeouts and second
signals force it, refused epochs are part of the stop, failures become one line."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ethereal_kafka.eos.gate import EpochGate
from ethereal_kafka.runtime.errors import JobFailedError
from ethereal_kafka.runtime.job import RunningJob
from ethereal_kafka.runtime.lifecycle import FINISHED, FORCED, GRACEFUL, JobLifecycle


class FakeQuery:
    """What the lifecycle uses of a StreamingQuery."""

    def __init__(self) -> None:
        self.active = True
        self.batch = -1
        self.error: BaseException | None = None
        self.stopped_at: float | None = None

    @property
    def isActive(self) -> bool:
        return self.active

    def awaitTermination(self, timeout: float) -> bool:
        time.sleep(min(timeout, 0.02))
        return not self.active

    def stop(self) -> None:
        self.active = False
        self.stopped_at = time.monotonic()

    def exception(self) -> BaseException | None:
        return self.error

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        return {"batchId": self.batch} if self.batch >= 0 else None

    @property
    def status(self) -> dict[str, Any]:
        return {"isTriggerActive": False}


def started(timeout_s: float = 5.0) -> tuple[JobLifecycle, EpochGate, FakeQuery]:
    query = FakeQuery()
    gate = EpochGate()
    lifecycle = JobLifecycle(timeout_s)
    lifecycle.attach(RunningJob({"out": query}), gate)  # type: ignore[dict-item]
    return lifecycle, gate, query


def epoch_in_flight(
    gate: EpochGate, query: FakeQuery, epoch: int, release: threading.Event
) -> threading.Thread:
    """A writer thread holding `epoch` open until `release`, then reporting its progress as Spark would."""
    entered = threading.Event()

    def write() -> None:
        with gate.epoch("out", epoch):
            entered.set()
            release.wait(10)
        query.batch = epoch

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    entered.wait(5)
    return thread


def test_graceful_stop_waits_for_the_epoch_in_flight_then_stops_the_query() -> None:
    lifecycle, gate, query = started()
    release = threading.Event()
    writer = epoch_in_flight(gate, query, 5, release)
    lifecycle.request_stop("SIGTERM")
    threading.Timer(0.3, release.set).start()
    began = time.monotonic()
    report = lifecycle.wait()
    writer.join(5)
    assert report.how == GRACEFUL and report.interrupted == {}
    assert query.stopped_at is not None and query.stopped_at - began >= 0.25  # not before the epoch ended
    assert report.line().startswith("stopped on SIGTERM: graceful in ")
    assert "out epoch 5 committed" in report.line()


def test_the_timeout_forces_the_stop_and_names_the_interrupted_epoch() -> None:
    lifecycle, gate, query = started(timeout_s=0.3)
    release = threading.Event()
    writer = epoch_in_flight(gate, query, 8, release)
    lifecycle.request_stop("SIGTERM")
    report = lifecycle.wait()
    release.set()
    writer.join(5)
    assert report.how == FORCED and report.interrupted == {"out": 8}
    assert "forced (shutdown.timeout.ms=300 passed)" in report.line()
    assert "interrupted: out epoch 8" in report.line()


def test_an_epoch_the_forced_stop_ends_is_interrupted_not_failed() -> None:
    lifecycle, gate, query = started(timeout_s=0.3)
    entered, outcome = threading.Event(), []

    def write() -> None:
        try:
            with gate.epoch("out", 8):
                entered.set()
                while query.active:  # Spark cancels the epoch's job when the query is stopped
                    time.sleep(0.01)
                raise RuntimeError("Job 3 cancelled part of cancelled job group")
        except RuntimeError:
            outcome.append(gate.interrupting)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    entered.wait(5)
    lifecycle.request_stop("SIGTERM")
    report = lifecycle.wait()
    writer.join(5)
    assert outcome == [True], "the write raised after the runner said it was stopping the queries"
    assert gate.last()["out"].interrupted and "interrupted: out epoch 8" in report.line()


def test_a_second_signal_forces_the_stop() -> None:
    lifecycle, gate, query = started(timeout_s=30)
    release = threading.Event()
    writer = epoch_in_flight(gate, query, 2, release)
    lifecycle.request_stop("SIGINT")
    threading.Timer(0.2, lifecycle.request_stop, args=("SIGINT",)).start()
    began = time.monotonic()
    report = lifecycle.wait()
    release.set()
    writer.join(5)
    assert report.how == FORCED and report.reason == "a second signal"
    assert time.monotonic() - began < 5


def test_an_epoch_refused_while_stopping_is_not_a_failure() -> None:
    lifecycle, gate, query = started()
    lifecycle.request_stop("SIGTERM")
    with pytest.raises(Exception) as refused, gate.epoch("out", 9):
        pass
    query.error, query.active = refused.value, False  # Spark ends the query with the writer's error
    report = lifecycle.wait()
    assert report.how == GRACEFUL and report.refused == [("out", 9)]
    assert "not started: out epoch 9" in report.line()


def test_a_failed_query_is_one_line_naming_the_epoch_and_the_cause() -> None:
    lifecycle, gate, query = started()
    with pytest.raises(ValueError), gate.epoch("out", 2):
        raise ValueError("bad record\nat line 2")
    query.error, query.active = RuntimeError("[STREAM_FAILED] huge\ntrace"), False
    with pytest.raises(JobFailedError) as failed:
        lifecycle.wait()
    assert str(failed.value) == "query out failed at epoch 2: ValueError: bad record"


def test_finished_when_the_queries_end_by_themselves() -> None:
    lifecycle, _gate, query = started()
    query.active = False
    report = lifecycle.wait()
    assert report.how == FINISHED and report.line().startswith("stopped: input consumed")


def test_a_stop_requested_before_the_job_started_closes_the_gate_on_attach() -> None:
    lifecycle = JobLifecycle(5)
    lifecycle.request_stop("SIGTERM")
    gate = EpochGate()
    lifecycle.attach(RunningJob({"out": FakeQuery()}), gate)  # type: ignore[dict-item]
    assert gate.closed
    assert lifecycle.wait().how == GRACEFUL


def test_a_query_between_epochs_stops_while_another_finishes_its_epoch() -> None:
    busy, idle = FakeQuery(), FakeQuery()
    gate = EpochGate()
    lifecycle = JobLifecycle(5)
    lifecycle.attach(RunningJob({"out": busy, "other": idle}), gate)  # type: ignore[dict-item]
    release = threading.Event()
    writer = epoch_in_flight(gate, busy, 3, release)
    lifecycle.request_stop("SIGTERM")
    threading.Timer(0.5, release.set).start()
    report = lifecycle.wait()
    writer.join(5)
    assert report.how == GRACEFUL
    assert idle.stopped_at is not None and busy.stopped_at is not None
    assert idle.stopped_at < busy.stopped_at - 0.2  # the idle query did not wait for the busy one's epoch


def test_an_epoch_writing_past_the_stall_timeout_stops_the_queries_and_fails_naming_it() -> None:
    stuck, other = FakeQuery(), FakeQuery()
    gate = EpochGate()
    lifecycle = JobLifecycle(5.0, log_hint=" (full trace under logs)", stall_timeout_s=0.3)
    lifecycle.attach(RunningJob({"out": stuck, "side": other}), gate)  # type: ignore[dict-item]
    release = threading.Event()
    writer = epoch_in_flight(gate, stuck, 4, release)
    began = time.monotonic()
    with pytest.raises(JobFailedError) as failed:
        lifecycle.wait()
    waited = time.monotonic() - began
    release.set()
    writer.join(5)
    assert 0.25 <= waited < 3.0
    assert not stuck.active and not other.active and gate.interrupting
    assert str(failed.value) == (
        f"query out epoch 4 has been writing for {round(waited)}s, longer than epoch.stall.timeout.ms=300: a task "
        "is stuck; the queries were stopped and the epoch is replayed when they start again (full trace under logs)"
    )


def test_epochs_within_the_stall_timeout_or_without_one_are_left_alone() -> None:
    for stall_s in (0.0, 30.0):
        query = FakeQuery()
        gate = EpochGate()
        lifecycle = JobLifecycle(5.0, stall_timeout_s=stall_s)
        lifecycle.attach(RunningJob({"out": query}), gate)  # type: ignore[dict-item]
        release = threading.Event()
        writer = epoch_in_flight(gate, query, 2, release)
        threading.Timer(0.5, release.set).start()
        threading.Timer(0.8, query.stop).start()
        report = lifecycle.wait()
        writer.join(5)
        assert report.how == FINISHED, stall_s
    assert gate.longest_in_flight() is None
