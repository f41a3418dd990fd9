"""The autoscaler with a fake executor control and a fake clock: placement, applied decisions, scale-downs only
between epochs, the decision list on the metrics, local-mode dry runs; the load derived from metric readings."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from ethereal_kafka.eos.gate import EpochGate
from ethereal_kafka.runtime import autoscaler as autoscaler_module
from ethereal_kafka.runtime.autoscaler import Autoscaler, LocalExecutors, load_between
from ethereal_kafka.runtime.metrics import LATENCY_BUCKETS, JobMetrics, LoadReading
from ethereal_kafka.runtime.scaling_policy import ScalingSettings

SETTINGS = ScalingSettings(
    policy="lag",
    min_executors=1,
    max_executors=2,
    scale_up_lag=1000,
    scale_down_lag=10,
    scale_up_cooldown_ms=0,
    scale_down_cooldown_ms=10_000,
    interval_ms=1000,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeExecutors:
    """Registered executors `0..n-1`; requests and releases are recorded."""

    applies = True

    def __init__(self, registered: int) -> None:
        self.ids = [str(i) for i in range(registered)]
        self.requests: list[int] = []
        self.released: list[str] = []

    def registered(self) -> int | None:
        return len(self.ids)

    def request(self, total: int) -> None:
        self.requests.append(total)
        while len(self.ids) < total:
            self.ids.append(str(len(self.ids) + len(self.released)))

    def release(self, keep: int) -> list[str]:
        gone, self.ids = self.ids[keep:], self.ids[:keep]
        self.released += gone
        return gone


def lagging(metrics: JobMetrics, lag: int) -> None:
    metrics.observe_progress(
        {
            "name": "app-out",
            "sources": [{"endOffset": {"t": {"0": 0}}, "latestOffset": {"t": {"0": lag}}}],
        }
    )


def scaler(registered: int = 2, control: Any = None) -> tuple[Autoscaler, Any, JobMetrics, EpochGate, Clock]:
    clock = Clock()
    metrics = JobMetrics("app", {}, clock=clock)
    gate = EpochGate()
    control = control or FakeExecutors(registered)
    return Autoscaler(SETTINGS, control, metrics, gate, clock=clock), control, metrics, gate, clock


def test_placement_then_scale_out_and_in_with_the_decisions_on_the_metrics() -> None:
    auto, control, metrics, _, clock = scaler(registered=2)
    assert auto.place().executors_after == 1
    assert control.released == ["1"] and control.requests == [1]
    lagging(metrics, 50_000)
    clock.now += 1
    up = auto.evaluate()
    assert (up.action, up.executors_after) == ("scale-up", 2) and control.requests[-1] == 2
    clock.now += 1
    assert auto.evaluate().reason.endswith("at autoscale.max.executors")
    lagging(metrics, 0)
    clock.now += 5
    assert "scale-down cooldown" in auto.evaluate().reason
    clock.now += 10
    down = auto.evaluate()
    assert (down.action, down.executors_after) == ("scale-down", 1) and control.ids == ["0"]
    decisions = metrics.scaling_decisions()
    assert [(d["action"], d["executors_before"], d["executors_after"]) for d in decisions] == [
        ("scale-down", 2, 1),
        ("scale-up", 1, 2),
        ("scale-down", 2, 1),
    ]
    assert set(decisions[0]) == {
        "time_ms",
        "action",
        "executors_before",
        "executors_after",
        "reason",
        "applied",
    }
    assert decisions[1]["time_ms"] == 1_700_000_001_000 and decisions[1]["applied"] is True
    assert decisions[0]["reason"].startswith("start: the job starts with autoscale.min.executors=1")
    text = generate_latest(_registry(metrics)).decode()
    assert (
        'ethereal_kafka_autoscale_decisions_total{action="scale-up",app_id="app",applied="true"} 1.0' in text
    )
    assert 'ethereal_kafka_autoscale_decisions_total{action="hold",app_id="app",applied="true"} 2.0' in text
    assert 'ethereal_kafka_executors{app_id="app",state="registered"} 1.0' in text


def test_executors_are_released_only_between_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autoscaler_module, "RELEASE_WAIT_S", 0.2)
    auto, control, metrics, gate, clock = scaler(registered=2)
    auto.state = auto.state.__class__(2, None, 0)
    lagging(metrics, 0)
    clock.now += 60
    entered, release = threading.Event(), threading.Event()

    def epoch() -> None:
        with gate.epoch("out", 4):
            entered.set()
            release.wait(5)

    writer = threading.Thread(target=epoch)
    writer.start()
    entered.wait(5)
    postponed = auto.evaluate()
    assert postponed.action == "hold" and postponed.reason == "epochs busy"
    assert control.released == [] and auto.state.executors == 2
    release.set()
    writer.join()
    assert auto.evaluate().action == "scale-down" and control.released == ["1"]


def test_local_mode_logs_what_it_would_do_and_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    auto, _, metrics, _, clock = scaler(control=LocalExecutors())
    assert auto.place().action == "hold"
    lagging(metrics, 50_000)
    clock.now += 1
    caplog.set_level("INFO", logger="ethereal_kafka.runtime.autoscaler")
    decision = auto.evaluate()
    assert (decision.action, decision.executors_after) == ("scale-up", 2)
    assert "autoscale (local mode: nothing changes): would scale-up 1 -> 2 executors" in caplog.text
    assert metrics.scaling_decisions()[-1]["applied"] is False


def test_load_between_two_readings() -> None:
    before = LoadReading(10.0, 5, {"a": 1.0, "b": 0.0}, tuple([0] * (len(LATENCY_BUCKETS) + 1)))
    buckets = [0] * (len(LATENCY_BUCKETS) + 1)
    buckets[LATENCY_BUCKETS.index(0.5)] = 98
    buckets[LATENCY_BUCKETS.index(5.0)] = 2
    now = LoadReading(15.0, 7, {"a": 4.0, "b": 1.0}, tuple(buckets))
    load = load_between(before, now)
    assert load.lag == 7
    assert load.utilization == pytest.approx(0.6)
    assert load.latency_p99_ms == 5000.0
    assert load_between(None, now).utilization is None
    assert load_between(now, now).latency_p99_ms is None


def _registry(metrics: JobMetrics) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)  # type: ignore[arg-type]
    return registry
