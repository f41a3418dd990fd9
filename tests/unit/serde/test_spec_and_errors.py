import pickle

import pytest

from ethereal_kafka.config import KafkaSinkConfig, KafkaSourceConfig
from ethereal_kafka.errors import ConfigError, EtherealKafkaError
from ethereal_kafka.serde import RegistryError, SerdeError, SerdeSpec, build_codec
from tests.unit.serde.conftest import ORDER_V1

BASE = {"bootstrap.servers": "127.0.0.1:9092"}


def test_from_settings_reads_the_fields_of_key_and_value() -> None:
    cfg = KafkaSourceConfig.from_properties(
        {
            **BASE,
            "topics": "orders",
            "key.format": "string",
            "value.format": "avro",
            "value.schema.file": ORDER_V1,
            "schema.registry.url": "http://registry:8081",
        }
    )
    key = SerdeSpec.from_settings(cfg, "key")
    value = SerdeSpec.from_settings(cfg, "value")
    assert (key.format, key.registry_url, key.subject) == ("string", None, None)
    assert (value.format, value.schema_file, value.registry_url) == ("avro", ORDER_V1, "http://registry:8081")
    assert value.subject == "orders-value"
    assert value.schema_text is not None and '"order_id"' in value.schema_text


def test_from_settings_json_and_sink_topic() -> None:
    cfg = KafkaSinkConfig.from_properties(
        {**BASE, "topic": "out", "value.format": "json", "value.schema": "a int"}
    )
    spec = SerdeSpec.from_settings(cfg, "value")
    assert (spec.format, spec.spark_ddl, spec.subject) == ("json", "a int", None)
    assert build_codec(spec).spark_ddl() == "`a` int"


@pytest.mark.parametrize(
    ("props", "field", "match"),
    [
        ({"value.format": "json"}, "value", "needs value.schema"),
        ({"key.format": "avro"}, "key", "needs key.schema.file or schema.registry.url"),
        ({"value.format": "avro", "value.schema.file": "/missing.avsc"}, "value", "No such file"),
        ({}, "header", "one of key, value"),
    ],
)
def test_from_settings_errors(props: dict[str, str], field: str, match: str) -> None:
    cfg = KafkaSourceConfig.from_properties({**BASE, "topics": "a", **props})
    with pytest.raises(ConfigError, match=match):
        SerdeSpec.from_settings(cfg, field)


def test_spec_is_frozen_picklable_and_masks_registry_conf() -> None:
    spec = SerdeSpec(
        "value",
        "avro",
        schema_file=ORDER_V1,
        registry_url="mock://x",
        registry_conf={"basic.auth.user.info": "u:secret"},
    )
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert "secret" not in repr(spec)
    with pytest.raises(AttributeError):
        spec.format = "json"  # type: ignore[misc]
    with pytest.raises(ConfigError, match="expected one of bytes, string, json, avro"):
        SerdeSpec("value", "xml")


def test_errors_keep_the_record_and_survive_pickling() -> None:
    error = SerdeError(
        "bad", field="value", topic="t", partition=1, offset=5, raw=b"\x01", cause_class="ValueError"
    )
    assert str(error) == "value of t[1]@5: bad (ValueError)"
    copy = pickle.loads(pickle.dumps(error))
    assert (
        copy.message,
        copy.field,
        copy.topic,
        copy.partition,
        copy.offset,
        copy.raw,
        copy.cause_class,
    ) == (
        "bad",
        "value",
        "t",
        1,
        5,
        b"\x01",
        "ValueError",
    )
    registry = pickle.loads(pickle.dumps(RegistryError("down", url="http://r", status=503)))
    assert (str(registry), registry.url, registry.status) == ("down", "http://r", 503)
    assert isinstance(error, EtherealKafkaError) and isinstance(registry, EtherealKafkaError)


def test_specs_are_hashable_values() -> None:
    conf = {"basic.auth.user.info": "u:p"}
    a = SerdeSpec("value", "avro", schema_file=ORDER_V1, registry_url="mock://x", registry_conf=conf)
    conf["basic.auth.user.info"] = "changed"
    b = SerdeSpec(
        "value",
        "avro",
        schema_file=ORDER_V1,
        registry_url="mock://x",
        registry_conf={"basic.auth.user.info": "u:p"},
    )
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
