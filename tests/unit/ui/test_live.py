"""The live UI's data: epochs from the coordinator's listener, after the app's earlier history; decisions."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ethereal_kafka.checkpoint.history import CheckpointHistory
from ethereal_kafka.runtime.description import RunDescription
from ethereal_kafka.runtime.metrics import JobMetrics, ScalingDecision
from ethereal_kafka.ui.live import LiveUi
from tests.unit.ui.test_server import _record


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _description() -> RunDescription:
    return RunDescription(
        app_id="app",
        started_ms=5,
        plan={"queries": [], "nodes": [], "edges": []},
        config={},
        job_file="/j",
        checkpoint_location="/c",
        delivery_guarantee="exactly-once",
    )


def test_epochs_follow_the_earlier_history_and_decisions_show() -> None:
    with CheckpointHistory("app") as history:
        history.record(_record(0))
        history.record(_record(1))
    ui = LiveUi(JobMetrics("app", {}))
    coordinator = SimpleNamespace(epoch_listeners=[])
    ui.watch(coordinator, _description())  # type: ignore[arg-type]
    (listener,) = coordinator.epoch_listeners
    listener("q", _record(2, txn_aborts=1), [])
    got = ui.epochs(-1)
    assert [(e["seq"], e["epoch"], e["outcome_detail"]) for e in got["entries"]] == [
        (0, 0, "committed"),
        (1, 1, "committed"),
        (2, 2, "aborted-and-redone"),
    ]
    assert got["next"] == 2 and ui.epochs(2) == {"entries": [], "next": 2}
    assert ui.overview()["mode"] == "live" and ui.overview()["job_file"] == "/j"
    assert ui.decisions() == {"available": False, "decisions": []}
    ui.metrics.record_decision(ScalingDecision(7, "scale-up", 1, 2, "lag 5000 > 1000"))
    assert ui.decisions()["decisions"] == [
        {
            "time_ms": 7,
            "action": "scale-up",
            "executors_before": 1,
            "executors_after": 2,
            "reason": "lag 5000 > 1000",
            "applied": True,
        }
    ]
