"""The UI server over a stopped app's history: the JSON API, the static pages, and nothing but reads."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.checkpoint.history import CheckpointHistory, EpochRecord
from ethereal_kafka.runtime.description import RunDescription
from ethereal_kafka.ui.offline import HistoryUi
from ethereal_kafka.ui.server import UiServer

BOUNDS = [0.5, 1.0, 2.0]


def _record(epoch: int, **changes: Any) -> EpochRecord:
    fields: dict[str, Any] = {
        "app_id": "app",
        "checkpoint_id": "c" * 36,
        "epoch": epoch,
        "mode": "shuffling",
        "start_offsets": {"in": {"0": epoch * 10}},
        "end_offsets": {"in": {"0": epoch * 10 + 10}},
        "records_in": 10,
        "records_out": 10,
        "tasks": 2,
        "skipped_tasks": 0,
        "started_ms": 2_000_000 + epoch * 1000,
        "duration_ms": 100,
        "outcome": "committed",
        "query": "q",
        "latency": {"bounds": BOUNDS, "counts": [epoch, 10 - epoch, 0, 0], "sum": 5.0},
    }
    fields.update(changes)
    return EpochRecord(**fields)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, HistoryUi]]:
    path = tmp_path / "history"
    with CheckpointHistory("app", path) as history:
        for epoch in range(3):
            history.record(_record(epoch, txn_aborts=1 if epoch == 1 else 0))
    plan = {"style": "dataframe", "queries": [{"name": "q", "sinks": ["out"]}], "nodes": [], "edges": []}
    description = RunDescription(
        app_id="app",
        started_ms=1_000_000,
        plan=plan,
        config={"job": {"app.id": "app"}},
        job_file="/x/job.properties",
        checkpoint_location="/x/ckpt",
        delivery_guarantee="exactly-once",
    )
    data = HistoryUi(description, path)
    server = UiServer(data)
    try:
        yield server.url, data
    finally:
        server.close()
        data.close()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"] == "application/json"
        return json.loads(response.read())


def test_api_serves_the_history_incrementally(served: tuple[str, HistoryUi]) -> None:
    url, _ = served
    first = _get(f"{url}api/epochs?after=-1")
    assert [(e["seq"], e["epoch"], e["outcome_detail"]) for e in first["entries"]] == [
        (0, 0, "committed"),
        (1, 1, "aborted-and-redone"),
        (2, 2, "committed"),
    ]
    assert first["next"] == 2
    assert _get(f"{url}api/epochs?after=2") == {"entries": [], "next": 2}
    # Epoch 0's latencies all lie in (0.5, 1.0]: the median is interpolated half-way up that bucket.
    assert first["entries"][0]["p50"] == pytest.approx(0.75)
    overview = _get(f"{url}api/overview")
    assert (overview["mode"], overview["app_id"], overview["running"]) == ("history", "app", False)
    assert _get(f"{url}api/plan")["queries"][0]["name"] == "q"
    assert _get(f"{url}api/live") is None
    latency = _get(f"{url}api/latency")["queries"]["q"]
    assert latency["count"] == 30 and latency["counts"] == [3, 27, 0, 0]
    assert _get(f"{url}api/decisions") == {"available": False, "decisions": []}


def test_pages_and_vendored_assets_are_served_and_nothing_else(served: tuple[str, HistoryUi]) -> None:
    url, _ = served
    with urllib.request.urlopen(url, timeout=5) as response:
        page = response.read().decode()
    assert "/static/vendor/cytoscape/cytoscape.min.js" in page
    for asset in (
        "app.js",
        "vendor/uplot/uPlot.iife.min.js",
        "vendor/cytoscape-dagre/cytoscape-dagre.min.js",
    ):
        with urllib.request.urlopen(f"{url}static/{asset}", timeout=5) as response:
            assert response.status == 200 and response.headers["Content-Type"] == (
                "text/javascript; charset=utf-8"
            )
    for missing in (
        "static/../server.py",
        "static/%2e%2e/server.py",
        "nothing",
        "api/nothing",
        "static/.hidden",
    ):
        with pytest.raises(urllib.error.HTTPError) as found:
            urllib.request.urlopen(f"{url}{missing}", timeout=5)
        assert found.value.code == 404, missing
    for method in ("POST", "PUT", "DELETE"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(
                urllib.request.Request(f"{url}api/epochs", method=method, data=b""), timeout=5
            )
        assert refused.value.code == 405


def test_a_busy_port_is_a_config_error(served: tuple[str, HistoryUi]) -> None:
    from ethereal_kafka.errors import ConfigError

    url, data = served
    port = int(url.rsplit(":", 1)[1].strip("/"))
    with pytest.raises(ConfigError, match=f"ui.port={port}"):
        UiServer(data, "127.0.0.1", port)
