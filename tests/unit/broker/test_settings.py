from pathlib import Path

import pytest

from ethereal_kafka.broker import BrokerSettings, LocalBroker, kafka_version
from ethereal_kafka.broker.jars import libs_dir
from ethereal_kafka.paths import cache_home


def test_cache_home_follows_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(tmp_path))
    assert cache_home() == tmp_path
    assert libs_dir().parent.parent == tmp_path
    assert libs_dir().parent.name.startswith(f"kafka-{kafka_version()}-")


def test_pinned_kafka_4() -> None:
    assert kafka_version().startswith("4.")


def test_status_of_a_broker_never_started(tmp_path: Path) -> None:
    status = LocalBroker(BrokerSettings(state_dir=tmp_path / "none")).status()
    assert not status.running and status.bootstrap is None
    assert "not running" in status.describe()
