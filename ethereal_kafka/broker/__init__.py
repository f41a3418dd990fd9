"""The local Apache Kafka broker: pinned jars from Maven Central, KRaft, no Docker needed; one node
(`LocalBroker`) or a cluster of N nodes (`LocalCluster`)."""

from ethereal_kafka.broker.cluster import ClusterSettings, ClusterStatus, LocalCluster
from ethereal_kafka.broker.jars import ensure_jars, kafka_version
from ethereal_kafka.broker.local import JVM_MARKER, BrokerSettings, BrokerStatus, LocalBroker

__all__ = [
    "JVM_MARKER",
    "BrokerSettings",
    "BrokerStatus",
    "ClusterSettings",
    "ClusterStatus",
    "LocalBroker",
    "LocalCluster",
    "ensure_jars",
    "kafka_version",
]
