import pytest

from ethereal_kafka.config import MASK, KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.errors import ConfigError, EtherealKafkaError

BASE = {"bootstrap.servers": "127.0.0.1:9092", "topics": "a,b"}


def test_types_defaults_and_passthrough() -> None:
    cfg = KafkaSourceConfig.from_properties(
        {**BASE, "max.records.per.epoch": "100", "kafka.fetch.max.bytes": "5"}
    )
    assert cfg.topics == ("a", "b")
    assert cfg.max_records_per_epoch == 100
    assert cfg.isolation_level == "read_committed"
    assert cfg.starting_offsets == "group-offsets"
    assert cfg.passthrough == {"fetch.max.bytes": "5"}


def test_unknown_key_without_a_close_one_is_rejected_with_the_known_keys() -> None:
    with pytest.raises(ConfigError) as info:
        KafkaSourceConfig.from_properties({**BASE, "colour": "x"}, source="orders.properties")
    message = str(info.value)
    assert message.startswith("orders.properties: unknown kafka source key(s) colour; known keys:")
    assert "topics" in message and "kafka.*" in message
    assert isinstance(info.value, EtherealKafkaError)


def test_a_did_you_mean_names_the_best_few_keys_not_the_whole_list() -> None:
    """Issue 24: the line named ~30 keys (~900 characters) after the suggestion."""
    with pytest.raises(ConfigError) as info:
        KafkaSourceConfig.from_properties(
            {**BASE, "topic": "x", "value.formt": "json"}, source="orders.properties"
        )
    assert str(info.value) == (
        "orders.properties: unknown kafka source key(s) topic (did you mean topics?), "
        "value.formt (did you mean value.format?)"
    )


def test_at_most_three_candidates_best_first() -> None:
    assert KafkaSourceConfig.suggest("value.schema.fil") == (
        "value.schema.fil (did you mean value.schema.file, value.schema or key.schema.file?)"
    )
    assert (
        KafkaSourceConfig.suggest("key.schemas")
        == "key.schemas (did you mean key.schema or key.schema.file?)"
    )


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("grup.id", "grup.id (did you mean group.id?)"),
        ("starting.offset", "starting.offset (did you mean starting.offsets?)"),
        ("kafak.linger.ms", "kafak.linger.ms (did you mean kafka.linger.ms?)"),
        ("colour", "colour"),
    ],
)
def test_unknown_key_gets_the_closest_known_key(key: str, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        KafkaSourceConfig.from_properties({**BASE, key: "x"}, source="orders.properties")
    assert str(info.value).startswith(f"orders.properties: unknown kafka source key(s) {shown}")


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"max.records.per.epoch": "ten"}, "expected int"),
        ({"max.records.per.epoch": "-1"}, "must be >= 0"),
        ({"isolation.level": "dirty"}, "expected one of read_committed, read_uncommitted"),
        ({"starting.offsets": "yesterday"}, "expected group-offsets"),
        ({"on.error": "dlq"}, "on.error=dlq needs dlq.topic"),
        ({"topic.pattern": "x.*"}, "exactly one of topics or topic.pattern"),
    ],
)
def test_bad_values(extra: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        KafkaSourceConfig.from_properties({**BASE, **extra})


def test_required_key() -> None:
    with pytest.raises(ConfigError, match=r"missing required kafka sink key.*bootstrap\.servers"):
        KafkaSinkConfig.from_properties({"topic": "out"})


def test_secrets_are_masked_in_repr_and_describe_but_round_trip() -> None:
    props = {**BASE, "kafka.sasl.password": "hunter2", "kafka.ssl.key.password": "k3y"}
    cfg = KafkaSourceConfig.from_properties(props)
    assert "hunter2" not in repr(cfg) and "k3y" not in str(cfg)
    assert cfg.describe()["kafka.sasl.password"] == MASK
    assert KafkaSourceConfig.from_properties(cfg.to_properties()) == cfg


def test_configs_are_frozen() -> None:
    cfg = KafkaSinkConfig.from_properties({"bootstrap.servers": "x", "topic": "out"})
    with pytest.raises(AttributeError):
        cfg.topic = "other"  # type: ignore[misc]
