"""`runtime.planners.PlannerRelease`: the planners' daemons are let go once, when every query of a start has begun
an epoch (the fork server's side: `test_fork_server.py`)."""

from __future__ import annotations

from ethereal_kafka.runtime.planners import PlannerRelease


def test_the_daemons_go_once_every_query_began_an_epoch_and_only_then() -> None:
    calls: list[int] = []
    release = PlannerRelease(["a", "b"], lambda: calls.append(1) is None)
    release("a", 0)
    release("a", 1)
    assert calls == [] and not release.released, "query b has not planned its reads yet"
    release("b", 4)
    assert calls == [1] and release.released
    release("a", 2)
    release("b", 5)
    assert calls == [1], "released once per start"
