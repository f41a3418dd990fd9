"""`ethereal-kafka offsets`: table and JSON rendering, app resolution (no broker)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint import apps
from ethereal_kafka.checkpoint.errors import AppNotFoundError
from ethereal_kafka.cli import build_parser
from ethereal_kafka.cli.app_job import format_table, resolve_app
from ethereal_kafka.cli.offsets_cmd import render, report
from ethereal_kafka.eos.committed import CommittedOffset, PartitionOffsets, ProgressOffsets
from ethereal_kafka.eos.markers import EpochMarker, ReplayMarker
from ethereal_kafka.errors import ConfigError

CKPT = "3f2a9c1d-aaaa-bbbb-cccc-0123456789ab"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(cache))
    return cache


def _partitions() -> list[PartitionOffsets]:
    epoch = EpochMarker("shop", CKPT, 7).render()
    return [
        PartitionOffsets("events", "shop", CommittedOffset("orders", 0, 120, epoch), 0, 150),
        PartitionOffsets(
            "events", "shop", CommittedOffset("orders", 1, 40, ReplayMarker("shop", 0).render()), 5, 40
        ),
        PartitionOffsets("events", "shop", CommittedOffset("orders", 2, None, None), 0, 9),
        PartitionOffsets("events", "shop", CommittedOffset("orders", 3, 1, "someone else"), 0, 1),
    ]


def _progress() -> list[ProgressOffsets]:
    topic = "shop.ethereal-progress"
    marker = EpochMarker("shop", CKPT, 7).render()
    return [
        ProgressOffsets(
            "out",
            f"{topic}.out",
            topic,
            (CommittedOffset(topic, 0, 8, marker), CommittedOffset(topic, 1, None, None)),
        )
    ]


def test_format_table_aligns_and_shows_none_as_dash() -> None:
    text = format_table(("NAME", "N"), [("a", 1), ("bbb", None), ("c", 100)], numeric=("N",))
    assert text.splitlines() == ["NAME    N", "a       1", "bbb     -", "c     100"]


def test_report_has_lag_markers_and_progress() -> None:
    doc = report("shop", _partitions(), _progress())
    json.dumps(doc)  # serialisable
    assert doc["lag"] == 30
    first, replayed, never, foreign = doc["partitions"]
    assert first == {
        "source": "events",
        "group": "shop",
        "topic": "orders",
        "partition": 0,
        "committed": 120,
        "earliest": 0,
        "end": 150,
        "lag": 30,
        "marker": {"kind": "epoch", "app_id": "shop", "checkpoint_id": CKPT, "epoch": 7},
        "metadata": f"shop:{CKPT}:7",
    }
    assert (
        replayed["marker"] == {"kind": "replay", "app_id": "shop", "replayed_ms": 0} and replayed["lag"] == 0
    )
    assert never["committed"] is None and never["lag"] is None and never["marker"] is None
    assert foreign["marker"] is None and foreign["metadata"] == "someone else"
    (progress,) = doc["progress"]
    assert progress["group"] == "shop.ethereal-progress.out"
    assert [p["offset"] for p in progress["partitions"]] == [8, None]
    assert progress["partitions"][0]["marker"]["epoch"] == 7


def test_render_shows_one_row_per_partition_and_the_progress_table() -> None:
    text = render("shop", _partitions(), _progress())
    lines = text.splitlines()
    assert lines[0] == "app shop: 4 input partition(s), total lag 30"
    header = lines[2].split()
    assert header == ["SOURCE", "GROUP", "TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MARKER"]
    assert lines[3].split() == [
        "events",
        "shop",
        "orders",
        "0",
        "120",
        "150",
        "30",
        "epoch",
        "7",
        "@",
        CKPT[:8],
    ]
    assert lines[4].endswith("replay 1970-01-01T00:00:00Z")
    assert lines[5].split()[4:] == ["-", "9", "-", "-"]
    assert lines[6].endswith("foreign")
    assert "progress markers (topic shop.ethereal-progress):" in text
    assert any(line.split()[:4] == ["out", "shop.ethereal-progress.out", "0", "8"] for line in lines)


def test_two_queries_reading_one_topic_count_its_partitions_once() -> None:
    """A 2-partition topic read by two queries (one consumer group each): 2 partitions, not 4; the total lag is the
    slowest query's, per partition (rows stay per group)."""
    rows = [
        PartitionOffsets("events", f"shop.{query}", CommittedOffset("orders", p, committed, None), 0, 100)
        for query, lags in (("enrich", (0, 10)), ("totals", (30, 5)))
        for p, committed in enumerate(100 - lag for lag in lags)
    ]
    text = render("shop", rows, [])
    assert text.splitlines()[0] == (
        "app shop: 2 input partition(s) (read by 2 queries, one consumer group each), total lag 40"
    )
    assert [line.split()[1] for line in text.splitlines()[3:]] == ["shop.enrich"] * 2 + ["shop.totals"] * 2
    assert report("shop", rows, [])["lag"] == 40


def test_render_without_progress_has_no_progress_table() -> None:
    assert "progress markers" not in render("shop", _partitions(), [])


def _write_job(folder: Path, app: str = "shop") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "src.properties").write_text(
        "connector.class=kafka-source\nname=events\nbootstrap.servers=localhost:1\ntopics=orders\n"
    )
    (folder / "sink.properties").write_text(
        "connector.class=kafka-sink\nname=out\nbootstrap.servers=localhost:1\ntopic=totals\n"
    )
    job = folder / "job.properties"
    job.write_text(
        f"app.id={app}\nsources=src.properties\nsinks=sink.properties\npipeline=m:f\ncheckpoint.location=ckpt\n"
    )
    return job


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["offsets", *argv])


def test_app_is_found_through_the_run_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _write_job(tmp_path / "jobs")
    monkeypatch.chdir(tmp_path)
    from ethereal_kafka.config.job import load_job

    apps.record_run(load_job(job), "inst")
    monkeypatch.chdir(tmp_path / "jobs")  # the record's absolute checkpoint wins over the current folder
    app = resolve_app(_args("shop"))
    assert app.app_id == "shop" and app.checkpoint_root == str(tmp_path / "ckpt")
    assert app.sources["events"].group == "shop", "the group defaults to the app id, as the runner runs it"
    assert app.sink.topic == "totals"


def test_job_file_names_the_app_and_must_agree_with_app(tmp_path: Path) -> None:
    job = _write_job(tmp_path)
    app = resolve_app(_args("--job", str(job)))
    assert app.app_id == "shop" and app.record is None
    assert resolve_app(_args("shop", "--job", str(job))).app_id == "shop"
    with pytest.raises(ConfigError, match="is app 'shop', not 'billing'"):
        resolve_app(_args("billing", "--job", str(job)))


def test_unknown_app_and_no_app_are_clear_errors() -> None:
    with pytest.raises(AppNotFoundError, match="pass --job FILE"):
        resolve_app(_args("nobody"))
    with pytest.raises(ConfigError, match="APP or --job FILE"):
        resolve_app(_args())
