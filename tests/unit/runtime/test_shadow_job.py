"""`runtime.shadow.shadow_job`: what a shadow run writes and reads instead of production's topics and groups."""

from __future__ import annotations

from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.shadows import ShadowError
from ethereal_kafka.config.job import load_job
from ethereal_kafka.runtime.shadow import run_shadow, shadow_job


def _files(tmp_path: Path, sink_topic: str = "topic=out\n") -> Path:
    (tmp_path / "in.properties").write_text(
        "connector.class=kafka-source\nbootstrap.servers=127.0.0.1:9\ntopics=a,b\nname=in\n"
        "on.error=dlq\ndlq.topic=bad-input\n"
    )
    (tmp_path / "out.properties").write_text(
        f"connector.class=kafka-sink\nbootstrap.servers=127.0.0.1:9\nname=out\n{sink_topic}"
    )
    job = tmp_path / "job.properties"
    job.write_text(
        "app.id=shop\nsources=in.properties\nsinks=out.properties\npipeline=m:f\n"
        f"checkpoint.location={tmp_path / 'cp'}\non.user.error=dlq\nuser.error.dlq.topic=bad-rows\n"
    )
    return job


def test_a_shadow_writes_every_topic_under_its_suffix_and_reads_only_the_range(tmp_path: Path) -> None:
    loaded = load_job(_files(tmp_path))
    shadow = shadow_job(loaded, "v2", tmp_path / "shadow-cp", {("a", 0): 40, ("a", 1): 7, ("c", 0): 3})
    assert shadow.job.app_id == "shop.shadow-v2"
    assert shadow.job.checkpoint_location == str(tmp_path / "shadow-cp")
    assert shadow.job.user_error_dlq_topic == "bad-rows.v2"
    (sink,) = shadow.sinks.values()
    assert sink.topic == "out.v2"
    (source,) = shadow.sources.values()
    assert (source.group_id, source.dlq_topic) == ("shop.shadow-v2", "bad-input.v2")
    # `c` is not read by the source; `b` is read but not in the range: it reads nothing
    assert source.ends() == {("a", 0): 40, ("a", 1): 7}


def test_a_sink_whose_rows_name_their_topic_is_refused(tmp_path: Path) -> None:
    loaded = load_job(_files(tmp_path, sink_topic=""))
    with pytest.raises(ShadowError, match=r"sink out of .* writes to the topics its rows name"):
        run_shadow(loaded, tmp_path / "sp", None, "v2")
