"""`runtime.planners.PlannerRelease`: the planners' daemons are let go once, after every query of a start
committed an epoch (the fork server's side: `test_fork_server.py`)."""

from __future__ import annotations

from types import SimpleNamespace

from ethereal_kafka.runtime.planners import PlannerRelease


def _epoch(outcome: str) -> SimpleNamespace:
    return SimpleNamespace(outcome=outcome)


def test_the_daemons_go_once_every_query_committed_an_epoch_and_only_then() -> None:
    calls: list[int] = []
    release = PlannerRelease(["a", "b"], lambda: calls.append(1) is None)
    release("a", _epoch("committed"), [])
    release("b", _epoch("failed"), [])
    release("b", _epoch("aborted"), [])
    assert calls == [] and not release.released, "query b has not planned a committed epoch yet"
    release("a", _epoch("committed"), [])
    assert calls == []
    release("b", _epoch("committed"), [])
    assert calls == [1] and release.released
    release("a", _epoch("committed"), [])
    release("b", _epoch("committed"), [])
    assert calls == [1], "released once per start"
