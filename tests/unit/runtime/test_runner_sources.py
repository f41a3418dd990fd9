"""`runner.job_sources`: how a job's sources start (group default, replay intent over `replay.from`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ethereal_kafka.config.job import LoadedJob, load_job
from ethereal_kafka.eos.replay import ReplayIntent
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.runtime.runner import job_sources


def _job(folder: Path, extra: str = "") -> LoadedJob:
    (folder / "a.properties").write_text(
        "connector.class=kafka-source\nname=a\nbootstrap.servers=localhost:1\ntopics=ta\n"
    )
    (folder / "b.properties").write_text(
        "connector.class=kafka-source\nname=b\nbootstrap.servers=localhost:1\ntopics=tb\nstarting.offsets=latest\n"
    )
    (folder / "sink.properties").write_text(
        "connector.class=kafka-sink\nname=out\nbootstrap.servers=localhost:1\ntopic=o\n"
    )
    (folder / "job.properties").write_text(
        "app.id=shop\nsources=a.properties,b.properties\nsinks=sink.properties\npipeline=m:f\n"
        f"checkpoint.location={folder / 'ckpt'}\n{extra}"
    )
    return load_job(folder / "job.properties")


def test_replay_intent_wins_for_the_sources_it_names_while_fresh(tmp_path: Path) -> None:
    loaded = _job(tmp_path, "replay.from=earliest\n")
    starts = ReplayIntent({"a": "ta:0:5"}, {})
    fresh = job_sources(loaded, True, starts)
    assert fresh["a"].starting_offsets == "ta:0:5"
    assert fresh["b"].starting_offsets == "earliest", "sources the intent does not name keep replay.from"
    assert all(s.group == "shop" for s in fresh.values())
    assert fresh["a"].checkpoint_location == f"{tmp_path / 'ckpt'}/sources"
    resumed = job_sources(loaded, False, starts)
    assert resumed["a"].starting_offsets == "group-offsets" and resumed["b"].starting_offsets == "latest"


def test_without_intent_nothing_changes(tmp_path: Path) -> None:
    loaded = _job(tmp_path)
    assert job_sources(loaded, True)["b"].starting_offsets == "latest"
    assert job_sources(loaded, True, None)["a"].starting_offsets == "group-offsets"


def test_a_restore_of_queries_that_stood_apart_starts_each_group_where_it_stood(tmp_path: Path) -> None:
    loaded = _job(tmp_path)
    intent = ReplayIntent({"a": "group-offsets"}, {"a": {"shop.q1": "ta:0:5", "shop.q2": "ta:0:9"}})
    source = job_sources(loaded, True, intent)["a"]
    assert dataclasses.replace(source, group_id="shop.q1").starting_offsets_of_group() == "ta:0:5"
    assert dataclasses.replace(source, group_id="shop.q2").starting_offsets_of_group() == "ta:0:9"
    with pytest.raises(ConfigError, match=r"source a, consumer group shop\.q3: .* \(shop\.q1, shop\.q2\)"):
        dataclasses.replace(source, group_id="shop.q3").starting_offsets_of_group()
    assert job_sources(loaded, False, intent)["a"].group_starting_offsets is None, "only while fresh"
    assert job_sources(loaded, True, intent)["b"].starting_offsets_of_group() == "latest"
