"""`python -m ethereal_kafka.demo.feed` (the compose file's `feed` service) against the session broker: it creates
the demo job's topics, keeps them on a second call, and feeds the orders each time."""

from __future__ import annotations

import uuid

import pytest

from ethereal_kafka.demo import demo_orders
from ethereal_kafka.demo.feed import main
from ethereal_kafka.testing import KafkaCluster, read_committed


def test_feed_creates_the_demo_topics_and_produces_orders(
    kafka_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topics = {var: f"feed-{var.lower()}-{suffix}" for var in ("DEMO_INPUT_TOPIC", "DEMO_OUTPUT_TOPIC")}
    topics["DEMO_REVENUE_TOPIC"] = f"feed-revenue-{suffix}"
    for var, topic in topics.items():
        monkeypatch.setenv(var, topic)
    bootstrap = kafka_cluster.bootstrap
    # main() sets it for the job file; monkeypatch restores it afterwards
    monkeypatch.setenv("ETHEREAL_KAFKA_BOOTSTRAP", bootstrap)
    assert main(["--bootstrap", bootstrap, "--records", "30"]) == 0
    first = capsys.readouterr().out
    assert f"created topics: {topics['DEMO_INPUT_TOPIC']}, {topics['DEMO_OUTPUT_TOPIC']}, " in first
    assert main(["--bootstrap", bootstrap, "--records", "30"]) == 0
    assert "created topics: none (all existed)" in capsys.readouterr().out
    got = read_committed(bootstrap, topics["DEMO_INPUT_TOPIC"])
    assert sorted(r.value for r in got if r.value) == sorted(v for _, v in demo_orders(30) * 2)
    assert read_committed(bootstrap, topics["DEMO_REVENUE_TOPIC"]) == []
