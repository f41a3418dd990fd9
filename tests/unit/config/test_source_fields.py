"""Which Kafka columns a DataStream pipeline sees as fields (`KafkaSourceConfig.pipeline_columns`)."""

from __future__ import annotations

import pytest

from ethereal_kafka.config.connectors import METADATA_COLUMNS, KafkaSourceConfig
from ethereal_kafka.errors import ConfigError


def _source(**settings: str) -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties({"bootstrap.servers": "b:9092", "topics": "t", **settings})


ORDER_FIELDS = ["order_id", "customer", "amount"]
COLUMNS = [*METADATA_COLUMNS, *ORDER_FIELDS]


def test_a_json_value_with_a_bytes_key_gives_exactly_the_values_fields() -> None:
    assert _source(**{"value.format": "json"}).pipeline_columns(COLUMNS) == ORDER_FIELDS


def test_a_string_key_is_payload_beside_decoded_fields() -> None:
    source = _source(**{"value.format": "json", "key.format": "string"})
    assert source.pipeline_columns(COLUMNS) == ["key", *ORDER_FIELDS]


def test_a_decoded_key_gives_its_fields_not_its_bytes() -> None:
    columns = [*METADATA_COLUMNS, "key_id", *ORDER_FIELDS]
    source = _source(**{"value.format": "json", "key.format": "json"})
    assert source.pipeline_columns(columns) == ["key_id", *ORDER_FIELDS]


@pytest.mark.parametrize("fmt", ["bytes", "string"])
def test_a_raw_value_comes_with_its_raw_key(fmt: str) -> None:
    assert _source(**{"value.format": fmt}).pipeline_columns(list(METADATA_COLUMNS)) == ["key", "value"]


def test_metadata_columns_are_added_on_request_in_column_order() -> None:
    source = _source(**{"value.format": "json", "metadata.columns": "offset,topic"})
    assert source.pipeline_columns(COLUMNS) == ["topic", "offset", *ORDER_FIELDS]
    everything = _source(**{"value.format": "json", "metadata.columns": "*"})
    assert everything.pipeline_columns(COLUMNS) == COLUMNS


def test_an_unknown_metadata_column_is_refused_with_the_choices() -> None:
    with pytest.raises(
        ConfigError, match=r"metadata.columns: unknown column\(s\) offsets \(choose from key, value"
    ):
        _source(**{"metadata.columns": "offsets"}).validate()
