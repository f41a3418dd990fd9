"""The autoscaler: evaluates the job's scaling policy every `autoscale.interval.ms` and applies its decisions
through Spark's own executor requests.

Who calls: the runner, `open_autoscaler()` after the coordinator's `prepare()` and before the queries start (the
job starts with `autoscale.min.executors`), and `Autoscaler.stop()` when the run ends.

How executors change (`SparkExecutors`, on any cluster manager with a coarse-grained scheduler backend: standalone,
YARN, Kubernetes): the JVM SparkContext's `requestTotalExecutors` sets how many executors the application wants (the
cluster manager launches the missing ones as cores free up), and `killExecutor` releases one. Executors are released
only between epochs (`EpochGate.between_epochs`), so no sink task is interrupted on an executor going away; the
newest executors go first. Spark's dynamic allocation is not used: it scales on pending tasks (it cannot see Kafka
lag), and with it Spark refuses `killExecutors`. In local mode (`LocalExecutors`) the policy runs the same way, logs
what it would do and changes nothing.

Every evaluation is counted in the metrics (`ethereal_kafka_autoscale_decisions_total{action, applied}`), every
scale-up and scale-down is logged with its reason and kept in `JobMetrics.scaling_decisions()`.

Nothing here touches what an epoch reads or writes: executors only change where tasks run. Tasks are pinned to
nothing but their partition (one per Kafka partition or per sink task, fixed for the job's life), so the output is
the same on one executor or on ten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ethereal_kafka.runtime.metrics import LATENCY_BUCKETS, JobMetrics, LoadReading
from ethereal_kafka.runtime.scaling_policy import (
    HOLD,
    Decision,
    Load,
    ScalerState,
    ScalingSettings,
    decide,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ethereal_kafka.config.job import JobConfig
    from ethereal_kafka.eos.gate import EpochGate

log = logging.getLogger(__name__)

#: How long a scale-down waits for the epochs in flight before it tries again at the next evaluation.
RELEASE_WAIT_S = 10.0


class ExecutorControl(Protocol):
    """Where the executor count is read and changed."""

    #: False when decisions are only logged (local mode).
    applies: bool

    def registered(self) -> int | None:
        """Executors registered with the driver now (None: not meaningful, local mode)."""

    def request(self, total: int) -> None:
        """Ask the cluster manager for `total` executors in all (launching happens in the background)."""

    def release(self, keep: int) -> list[str]:
        """Remove registered executors beyond the oldest `keep`; returns the ids removed."""


class SparkExecutors:
    """Executor requests through the JVM SparkContext (Spark's `ExecutorAllocationClient` API)."""

    applies = True

    def __init__(self, spark: SparkSession) -> None:
        self._jsc: Any = spark.sparkContext._jsc.sc()
        self._jvm: Any = spark.sparkContext._jvm

    def ids(self) -> list[str]:
        """Registered executor ids, oldest first."""
        seq = self._jsc.getExecutorIds()
        found = [str(seq.apply(i)) for i in range(seq.size())]
        return sorted(found, key=lambda i: (len(i), i))

    def registered(self) -> int | None:
        """Executors registered with the driver now."""
        return len(self.ids())

    def request(self, total: int) -> None:
        """`SparkContext.requestTotalExecutors(total, 0, Map())`: the application's executor target."""
        empty = getattr(self._jvm.scala.collection.immutable, "Map$").__getattr__("MODULE$").empty()
        if not self._jsc.requestTotalExecutors(int(total), 0, empty):
            log.warning("Spark did not acknowledge the request for %d executors", total)

    def release(self, keep: int) -> list[str]:
        """`SparkContext.killExecutor(id)` for each executor beyond the oldest `keep` (the target is lowered with
        each kill, so the cluster manager does not replace them)."""
        extra = self.ids()[keep:]
        for executor in extra:
            self._jsc.killExecutor(executor)
        return extra


class LocalExecutors:
    """Local mode: nothing to scale; the autoscaler logs what it would do."""

    applies = False

    def registered(self) -> int | None:
        """Not meaningful in local mode."""
        return None

    def request(self, total: int) -> None:
        """Nothing happens."""

    def release(self, keep: int) -> list[str]:
        """Nothing happens."""
        return []


def load_between(before: LoadReading | None, now: LoadReading) -> Load:
    """The load of the interval between two readings (the lag as of `now`; utilisation and latency from the
    differences; without `before`, only the lag)."""
    if before is None:
        return Load(lag=now.lag)
    elapsed = now.at - before.at
    busy = [s - before.epoch_seconds.get(q, 0.0) for q, s in now.epoch_seconds.items()]
    utilization = min(1.0, max(busy, default=0.0) / elapsed) if elapsed > 0 else None
    counts = [a - b for a, b in zip(now.latency_buckets, before.latency_buckets, strict=True)]
    return Load(lag=now.lag, utilization=utilization, latency_p99_ms=_quantile_ms(counts, 0.99))


def _quantile_ms(counts: list[int], q: float) -> float | None:
    """The upper bound (ms) of the bucket holding quantile `q` (the last finite bound for `+Inf`); None when
    empty."""
    total = sum(counts)
    if total <= 0:
        return None
    running = 0
    for bound, n in zip((*LATENCY_BUCKETS, LATENCY_BUCKETS[-1]), counts, strict=True):
        running += n
        if running >= q * total:
            return bound * 1000
    return LATENCY_BUCKETS[-1] * 1000


class Autoscaler:
    """Runs the scaling policy of one job run on a daemon thread (or one `evaluate()` at a time in tests).

    Args:
        settings: The policy.
        control: Where executors are read and changed.
        metrics: Feeds the load and receives every decision.
        gate: The coordinator's epoch gate (scale-downs wait for a moment between epochs).
        clock: Wall time in seconds (decision times, cooldowns).
    """

    def __init__(
        self,
        settings: ScalingSettings,
        control: ExecutorControl,
        metrics: JobMetrics,
        gate: EpochGate,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.control = control
        self.metrics = metrics
        self.gate = gate
        self._clock = clock
        self._reading: LoadReading | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        now = self._now_ms()
        registered = control.registered()
        self.state = ScalerState(registered if registered is not None else settings.min_executors, None, now)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def place(self) -> Decision:
        """Bring the executor count to `autoscale.min.executors` (the start; call before the queries start)."""
        now = self._now_ms()
        before = self.state.executors
        target = self.settings.min_executors
        action = "scale-up" if target > before else ("scale-down" if target < before else HOLD)
        decision = Decision(
            action, before, target, f"start: the job starts with autoscale.min.executors={target}"
        )
        self._apply(decision, now)
        self.state = ScalerState(target, None, now)
        return decision

    def evaluate(self) -> Decision:
        """One evaluation: read the load, decide, apply, count and log. Thread-safe."""
        with self._lock:
            now = self._now_ms()
            reading = self.metrics.load_reading()
            load = load_between(self._reading, reading)
            self._reading = reading
            decision = decide(self.settings, self.state, load, now)
            if not self._apply(decision, now):
                return Decision(HOLD, decision.executors_before, decision.executors_before, "epochs busy")
            self.state = self.state.after(decision, now)
            return decision

    def _apply(self, decision: Decision, now_ms: int) -> bool:
        control = self.control
        if decision.action == HOLD:
            self._reconcile()
        elif control.applies and not self._resize(decision.executors_after):
            log.info("autoscale: %s postponed, epochs busy", decision.action)
            return False
        if decision.action != HOLD:
            log.info(
                "%s %s %d -> %d executors: %s",
                "autoscale:" if control.applies else "autoscale (local mode: nothing changes): would",
                decision.action,
                decision.executors_before,
                decision.executors_after,
                decision.reason,
            )
        self._count(decision, now_ms)
        return True

    def _resize(self, target: int) -> bool:
        """Ask for `target` executors; release the ones beyond it between epochs (False: epochs stayed busy)."""
        control = self.control
        control.request(target)
        if target < (control.registered() or 0):
            with self.gate.between_epochs(RELEASE_WAIT_S) as idle:
                if not idle:
                    return False
                released = control.release(target)
            log.debug("autoscale: released executors %s", ", ".join(released))
        return True

    def _reconcile(self) -> None:
        """Release executors registered beyond the target (launched before the target was lowered)."""
        control = self.control
        if control.applies and (control.registered() or 0) > self.state.executors:
            with self.gate.between_epochs(0.0) as idle:
                if idle:
                    released = control.release(self.state.executors)
                    log.debug("autoscale: released late executors %s", ", ".join(released))

    def _count(self, decision: Decision, now_ms: int) -> None:
        applies = self.control.applies
        self.metrics.observe_scaling(
            now_ms,
            decision.action,
            decision.executors_before,
            decision.executors_after,
            decision.reason if applies else f"local mode, not applied: {decision.reason}",
            applies,
            self.control.registered(),
        )
        if decision.action == HOLD:
            log.debug("autoscale: hold at %d executors: %s", decision.executors_before, decision.reason)

    # -- thread ------------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Evaluate every `autoscale.interval.ms` on a daemon thread until `stop()`."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="ethereal-kafka-autoscaler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.interval_ms / 1000):
            try:
                self.evaluate()
            except Exception:
                # Spark stopping under the thread, or a py4j hiccup: scaling is never worth failing the job for.
                log.warning("autoscale evaluation failed", exc_info=True)

    def stop(self) -> None:
        """Stop evaluating (idempotent); the executors stay as they are."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None


def open_autoscaler(
    spark: SparkSession, job: JobConfig, metrics: JobMetrics | None, gate: EpochGate
) -> Autoscaler | None:
    """The run's autoscaler, placed at `autoscale.min.executors` (None with `autoscale.policy=off`, or without
    metrics to feed it). Start it once the queries run."""
    if job.autoscale_policy == "off":
        return None
    if metrics is None:
        log.warning("autoscale.policy=%s ignored: the run has no metrics to feed it", job.autoscale_policy)
        return None
    master = spark.sparkContext.master or ""
    control: ExecutorControl = LocalExecutors() if master.startswith("local") else SparkExecutors(spark)
    scaler = Autoscaler(ScalingSettings.from_job(job), control, metrics, gate)
    scaler.place()
    return scaler
