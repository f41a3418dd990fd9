"""Whether to restart a job's queries after a failed epoch: Flink's restart strategies on the job's `restart.*` keys.

`RestartTracker.decide` is a pure decision (it carries its reason); the runner (`runtime.runner.execute`) acts on it:
it stops the failed run's queries, waits the delay, and starts the queries again from their checkpoint in the same
process (same SparkSession, no new JVM). Exactly-once is what makes that safe: the failed epoch committed nothing, so
the restarted query replays it from Spark's offset log, and sink tasks that had committed skip by their markers.

Strategies (`config.job.RestartPolicy`):

- `none`: never restart; the run exits with the failure's line.
- `fixed-delay`: restart up to `attempts` times, `delay_ms` apart; the next failure ends the run.
- `failure-rate`: restart `delay_ms` after each failure while at most `max_failures` failures fall within the last
  `interval_ms`; one more ends the run.

Some failures are never restarted, whatever the strategy: another instance took the app over (`FencedError`), or
Spark's checkpoint disagrees with Kafka (`CheckpointMismatchError`, `RecoveryError`): a restart would meet the same
refusal, or fence the new owner.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ethereal_kafka.config.job import RestartPolicy

#: Error classes whose presence in a failure's text means a restart cannot help (see the module docstring).
NOT_RESTARTABLE = ("FencedError", "CheckpointMismatchError", "RecoveryError", "AppRunningError")


@dataclass(frozen=True)
class Decision:
    """What to do after a failure.

    Attributes:
        restart: Start the queries again.
        delay_s: How long to wait first.
        reason: Why, for the log line (`restart 1 of 3`, `3 failures within 60000 ms`, ...).
    """

    restart: bool
    delay_s: float
    reason: str


class RestartTracker:
    """Applies a `RestartPolicy` to the failures of one run.

    Args:
        policy: The job's policy.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, policy: RestartPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self.restarts = 0
        self._failures: deque[float] = deque()

    def decide(self, failure: str) -> Decision:
        """Record one failure (its text: the failure line or the error's full text) and decide.

        Returns a decision to restart after `delay_s`, or not to (the run ends with the failure).
        """
        policy = self.policy
        now = self._clock()
        self._failures.append(now)
        blocked = next((name for name in NOT_RESTARTABLE if name in failure), None)
        if blocked is not None:
            return Decision(False, 0.0, f"a {blocked} is not restarted")
        delay = policy.delay_ms / 1000
        if policy.strategy == "fixed-delay":
            if self.restarts >= policy.attempts:
                return Decision(False, 0.0, f"{policy.attempts} restart(s) used ({policy.describe()})")
            self.restarts += 1
            return Decision(True, delay, f"restart {self.restarts} of {policy.attempts}")
        if policy.strategy == "failure-rate":
            while self._failures and self._failures[0] < now - policy.interval_ms / 1000:
                self._failures.popleft()
            if len(self._failures) > policy.max_failures:
                return Decision(
                    False,
                    0.0,
                    f"{len(self._failures)} failures within {policy.interval_ms} ms ({policy.describe()})",
                )
            self.restarts += 1
            return Decision(
                True,
                delay,
                f"restart {self.restarts}; {len(self._failures)} of at most {policy.max_failures} failures within "
                f"{policy.interval_ms} ms",
            )
        return Decision(False, 0.0, "restart.strategy=none")
