"""Configuration: `.properties` files to frozen, validated models (job, connectors, serde, checkpoint)."""

from ethereal_kafka.config.connectors import KafkaSinkConfig, KafkaSourceConfig, SerdeSettings
from ethereal_kafka.config.job import JobConfig, LoadedJob, load_connector, load_job, validate_file
from ethereal_kafka.config.model import MASK, Model, is_secret, mask_mapping, setting
from ethereal_kafka.config.properties import load_properties, parse_properties

__all__ = [
    "MASK",
    "JobConfig",
    "KafkaSinkConfig",
    "KafkaSourceConfig",
    "LoadedJob",
    "Model",
    "SerdeSettings",
    "is_secret",
    "load_connector",
    "load_job",
    "load_properties",
    "mask_mapping",
    "parse_properties",
    "setting",
    "validate_file",
]
