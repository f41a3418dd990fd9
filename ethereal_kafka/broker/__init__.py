"""The local Apache Kafka broker: pinned jars from Maven Central, KRaft single node, no Docker needed."""

from ethereal_kafka.broker.jars import ensure_jars, kafka_version
from ethereal_kafka.broker.local import JVM_MARKER, BrokerSettings, BrokerStatus, LocalBroker

__all__ = [
    "JVM_MARKER",
    "BrokerSettings",
    "BrokerStatus",
    "LocalBroker",
    "ensure_jars",
    "kafka_version",
]
