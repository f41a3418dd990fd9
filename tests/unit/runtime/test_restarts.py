"""Restart strategies (issue 24, item 7): Flink's `none`, `fixed-delay` and `failure-rate` on the job's `restart.*`
keys, decided purely (`runtime.restarts.RestartTracker`) and refused in one line when misconfigured."""

from __future__ import annotations

import pytest

from ethereal_kafka.config.job import JobConfig, RestartPolicy
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.runtime.restarts import RestartTracker
from ethereal_kafka.runtime.summary import RunSummary

BASE = {"app.id": "a", "sources": "s", "sinks": "k", "pipeline": "m:f", "checkpoint.location": "/tmp/x"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_fixed_delay_restarts_so_many_times_then_gives_up() -> None:
    tracker = RestartTracker(RestartPolicy("fixed-delay", attempts=2, delay_ms=500))
    first, second, third = (tracker.decide("query q failed: boom") for _ in range(3))
    assert (first.restart, first.delay_s, first.reason) == (True, 0.5, "restart 1 of 2")
    assert (second.restart, second.reason) == (True, "restart 2 of 2")
    assert (third.restart, third.reason) == (
        False,
        "2 restart(s) used (restart.strategy=fixed-delay, restart.attempts=2)",
    )
    assert tracker.restarts == 2


def test_failure_rate_gives_up_when_too_many_failures_fall_in_the_interval() -> None:
    clock = Clock()
    tracker = RestartTracker(
        RestartPolicy("failure-rate", max_failures=2, interval_ms=10_000, delay_ms=0), clock
    )
    assert tracker.decide("x").restart
    clock.now = 4
    assert tracker.decide("x").restart
    clock.now = 12  # the first failure left the interval
    assert tracker.decide("x").restart
    clock.now = 13
    decision = tracker.decide("x")
    assert not decision.restart and decision.reason.startswith("3 failures within 10000 ms")


def test_none_and_failures_a_restart_cannot_help_are_not_restarted() -> None:
    assert not RestartTracker(RestartPolicy("none")).decide("x").restart
    fixed = RestartTracker(RestartPolicy("fixed-delay", attempts=5))
    decision = fixed.decide("... FencedError: app a: another instance (b) took over ...")
    assert (decision.restart, decision.reason) == (False, "a FencedError is not restarted")


def test_policies_come_from_the_job_and_a_wrong_one_is_refused_in_one_line() -> None:
    job = JobConfig.from_properties({**BASE, "restart.strategy": "failure-rate", "restart.delay.ms": "10"})
    assert job.restart_policy == RestartPolicy(
        "failure-rate", attempts=3, delay_ms=10, max_failures=3, interval_ms=60000
    )
    refused = {
        "restart.attempts applies to restart.strategy=fixed-delay, but the job sets restart.strategy=none": {
            "restart.attempts": "2"
        },
        "restart.failure-rate.max-failures applies to restart.strategy=failure-rate": {
            "restart.strategy": "fixed-delay",
            "restart.failure-rate.max-failures": "2",
        },
        "the job would never give up": {"restart.strategy": "failure-rate", "restart.delay.ms": "20000"},
        "restart.attempts=0: must be > 0": {"restart.strategy": "fixed-delay", "restart.attempts": "0"},
        "on.user.error=dlq needs user.error.dlq.topic": {"on.user.error": "dlq"},
        "user.error.dlq.topic is set but on.user.error=fail": {"user.error.dlq.topic": "t"},
        "expected one of fail, skip, dlq": {"on.user.error": "retry"},
        "expected one of none, fixed-delay, failure-rate": {"restart.strategy": "exponential"},
    }
    for text, extra in refused.items():
        with pytest.raises(ConfigError) as caught:
            JobConfig.from_properties({**BASE, **extra}, "job.properties")
        assert text in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_the_summary_shows_user_errors_and_restarts_when_there_are_some() -> None:
    quiet = RunSummary("a", 1.0, 10)
    assert not any("restarts" in line or "user errors" in line for line in quiet.lines())
    busy = RunSummary("a", 1.0, 10, user_errors={"dlq": 3, "skip": 1}, restarts=2)
    assert "  user errors    3 dead-lettered, 1 skipped" in busy.lines()
    assert "  restarts       2" in busy.lines()
    assert "  dead-lettered  0 undecodable, 3 from user code" in busy.lines()
    assert "  dead-lettered  0" in RunSummary("a", 1.0, 10, user_errors={"skip": 1}).lines()


def test_the_summary_counts_epochs_a_stop_interrupted_apart_from_failed_ones() -> None:
    epochs = {"committed": 4, "failed": 0}
    assert "  epochs         4 committed, 0 failed" in RunSummary("a", 1.0, 10, epochs=epochs).lines()
    stopped = RunSummary("a", 1.0, 10, epochs={**epochs, "interrupted": 1}).lines()
    assert "  epochs         4 committed, 0 failed, 1 interrupted by the stop" in stopped, stopped
