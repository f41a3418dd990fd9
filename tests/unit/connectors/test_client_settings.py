"""`kafka.*` keys librdkafka refuses get a did-you-mean from the properties the running librdkafka knows (issue 24,
item 5: `kafka.fetch.max.byte` had none)."""

from __future__ import annotations

from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.connectors.kafka.checks import check_client_settings
from ethereal_kafka.connectors.kafka.librdkafka_properties import known_properties


def test_the_running_librdkafka_lists_its_properties_aliases_and_unset_ones_included() -> None:
    names = known_properties()
    assert len(names) > 150
    for name in ("bootstrap.servers", "linger.ms", "acks", "group.id", "sasl.password", "fetch.max.bytes"):
        assert name in names


def test_an_unknown_kafka_key_gets_the_closest_librdkafka_properties() -> None:
    config = KafkaSourceConfig.from_properties(
        {"bootstrap.servers": "127.0.0.1:9", "topics": "t", "kafka.fetch.max.byte": "1000"}
    )
    assert check_client_settings(config, "in.properties") == (
        'in.properties: librdkafka rejects the kafka.* settings: No such configuration property: "fetch.max.byte" '
        "(did you mean kafka.fetch.max.bytes, kafka.fetch.min.bytes or kafka.fetch.message.max.bytes?)"
    )


def test_a_sink_typo_and_a_key_with_nothing_close() -> None:
    typo = KafkaSinkConfig.from_properties(
        {"bootstrap.servers": "127.0.0.1:9", "topic": "t", "kafka.aks": "all"}
    )
    assert str(check_client_settings(typo, "out.properties")).endswith(
        'No such configuration property: "aks" (did you mean kafka.acks?)'
    )
    far = KafkaSinkConfig.from_properties(
        {"bootstrap.servers": "127.0.0.1:9", "topic": "t", "kafka.zzzz": "1"}
    )
    assert str(check_client_settings(far, "out.properties")).endswith(
        'No such configuration property: "zzzz"'
    )


def test_a_bad_value_gets_no_did_you_mean() -> None:
    config = KafkaSourceConfig.from_properties(
        {"bootstrap.servers": "127.0.0.1:9", "topics": "t", "kafka.fetch.max.bytes": "lots"}
    )
    line = str(check_client_settings(config, "in.properties"))
    assert "fetch.max.bytes" in line and "did you mean" not in line
