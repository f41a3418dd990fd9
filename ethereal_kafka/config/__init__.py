"""Configuration: `.properties` files to frozen, validated models (job, connectors, serde, checkpoint)."""

from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig, SerdeSettings
from ethereal_kafka.config.model import MASK, Model, is_secret, mask_mapping, setting
from ethereal_kafka.config.properties import load_properties, parse_properties

__all__ = [
    "MASK",
    "KafkaSinkConfig",
    "KafkaSourceConfig",
    "Model",
    "SerdeSettings",
    "is_secret",
    "load_properties",
    "mask_mapping",
    "parse_properties",
    "setting",
]
