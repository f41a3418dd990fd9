"""Offline checks of connector configurations (`ethereal-kafka validate`): serde settings, schemas, columns.

No network: a schema registry is not contacted, so avro settings that read their schema from a registry are only
checked for completeness.
"""

from __future__ import annotations

from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig, KafkaTableConfig
from ethereal_kafka.connectors.kafka.decoding import SourceLayout
from ethereal_kafka.serde import SerdeSpec


def check_connector(config: KafkaSourceConfig | KafkaSinkConfig | KafkaTableConfig) -> None:
    """Parse every schema the connector names and, for a source, fix its output columns.

    Raises:
        ConfigError: a missing schema, an unreadable or malformed `.avsc`, a malformed Spark DDL, or a decoded
            column that would shadow another.
    """
    offline = True
    for field in ("key", "value"):
        sink_json = isinstance(config, KafkaSinkConfig) and getattr(config, f"{field}_format") == "json"
        if sink_json and getattr(config, f"{field}_schema") is None:
            continue  # a sink takes a json record's schema from its columns
        spec = SerdeSpec.from_settings(config, field)
        if spec.format == "avro" and spec.schema_text is None:
            offline = False  # the reader schema comes from the registry at start
            continue
        spec.build().arrow_type()
    if isinstance(config, KafkaSourceConfig) and offline:
        SourceLayout.from_config(config)
