"""`--available-now` with queries Spark keeps running without data (transformWithState in ProcessingTime mode): the
lifecycle stops them once an epoch of this run read nothing, and reports the run as finished."""

from __future__ import annotations

import threading
from typing import Any

from ethereal_kafka.eos.gate import EpochGate
from ethereal_kafka.runtime.job import RunningJob
from ethereal_kafka.runtime.lifecycle import FINISHED, JobLifecycle
from tests.unit.runtime.test_lifecycle import FakeQuery


class SourcedQuery(FakeQuery):
    """A query whose progress names its source's start and end offsets."""

    def __init__(self) -> None:
        super().__init__()
        self.read = True

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        if self.batch < 0:
            return None
        start, end = ('{"p0": 1}', '{"p0": 2}') if self.read else ('{"p0": 2}', '{"p0": 2}')
        return {"batchId": self.batch, "sources": [{"startOffset": start, "endOffset": end}]}


def _waiting(query: SourcedQuery, drain: bool) -> tuple[JobLifecycle, threading.Thread, list[Any]]:
    lifecycle = JobLifecycle(5)
    lifecycle.stop_when_drained = drain
    lifecycle.attach(RunningJob({"out": query}), EpochGate())  # type: ignore[dict-item]
    reports: list[Any] = []
    thread = threading.Thread(target=lambda: reports.append(lifecycle.wait()), daemon=True)
    thread.start()
    return lifecycle, thread, reports


def test_a_no_data_epoch_after_the_first_of_the_run_ends_an_available_now_run() -> None:
    query = SourcedQuery()
    query.batch, query.read = 7, False  # the run's first epoch replays a logged no-data epoch: not decisive
    _, thread, reports = _waiting(query, drain=True)
    thread.join(0.3)
    assert thread.is_alive() and query.active
    query.batch, query.read = 8, True
    thread.join(0.3)
    assert thread.is_alive()
    query.batch, query.read = 9, False
    thread.join(5)
    assert not thread.is_alive() and not query.active
    assert reports[0].how == FINISHED
    assert reports[0].line().startswith("stopped: input consumed (available-now)")


def test_without_available_now_no_data_epochs_keep_running() -> None:
    query = SourcedQuery()
    query.batch, query.read = 1, True
    lifecycle, thread, _ = _waiting(query, drain=False)
    query.batch, query.read = 2, False
    thread.join(0.5)
    assert thread.is_alive() and query.active
    lifecycle.request_stop("SIGTERM")
    thread.join(5)
    assert not thread.is_alive()
