"""`kafka.*` pass-through settings the exactly-once protocol owns are refused (`config.connectors`)."""

from __future__ import annotations

import pytest

from ethereal_kafka.config.connectors import (
    PROTOCOL_SETTINGS,
    KafkaSinkConfig,
    KafkaSourceConfig,
    KafkaTableConfig,
)
from ethereal_kafka.errors import ConfigError

BASE = {
    KafkaSourceConfig: {"bootstrap.servers": "b:9092", "topics": "t"},
    KafkaSinkConfig: {"bootstrap.servers": "b:9092", "topic": "t"},
    KafkaTableConfig: {"bootstrap.servers": "b:9092", "topic": "t"},
}


@pytest.mark.parametrize("key", sorted(PROTOCOL_SETTINGS))
@pytest.mark.parametrize("model", list(BASE), ids=lambda m: m.__name__)
def test_a_protocol_setting_passed_through_is_refused_in_one_line(key: str, model: type) -> None:
    """Before, `kafka.isolation.level=read_uncommitted` reached the marker and claim reads (a marker of an open
    transaction read as committed), `kafka.transaction.timeout.ms` the sink producers (a timeout the epoch bounds
    were never checked against)."""
    with pytest.raises(ConfigError, match=rf"^kafka\.{key}: set by ethereal-kafka itself") as refused:
        model.from_properties({**BASE[model], f"kafka.{key}": "x"})
    assert "\n" not in str(refused.value)


def test_other_librdkafka_settings_still_pass_through() -> None:
    sink = KafkaSinkConfig.from_properties({**BASE[KafkaSinkConfig], "kafka.linger.ms": "20"})
    assert sink.passthrough == {"linger.ms": "20"}
