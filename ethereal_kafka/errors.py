"""The exception hierarchy: every error the framework raises derives from `EtherealKafkaError`.

Callers that only want to know "did ethereal-kafka refuse or fail?" catch the root; callers that can act on a
specific cause catch the subclass. Every subclass docstring says when it is raised and what the caller can do.
"""

from __future__ import annotations


class EtherealKafkaError(Exception):
    """Root of every exception raised by ethereal-kafka on purpose."""


class ConfigError(EtherealKafkaError):
    """A configuration file or value is invalid (unknown key, bad value, missing required key).

    Raised while loading or validating configuration, before anything runs. Fix the named key and retry.
    """


class BrokerError(EtherealKafkaError):
    """The local Apache Kafka broker could not be resolved, started, reached or stopped.

    The message is one line that names the cause (missing Java or Maven, busy port, failed download, start-up
    timeout) and, where there is one, the log file to read.
    """


class KafkaConnectionError(EtherealKafkaError):
    """A Kafka cluster did not answer after bounded retries (wrong `bootstrap.servers`, broker down)."""


class SparkSetupError(EtherealKafkaError):
    """The local SparkSession could not be created (missing Java, Python worker cannot connect back)."""


class RecordTooLargeError(EtherealKafkaError):
    """A record is larger than the producer (`message.max.bytes`) or its topic (`max.message.bytes`) accepts.

    Raised by a sink task (exactly-once: before its transaction is retried in vain); the epoch fails, and fails again
    at every replay until the record fits. The message names the topic, the record's size and key, and the sink
    task's input. Raise the limits (`kafka.message.max.bytes` on the sink and the topic's `max.message.bytes`), or
    drop or trim such records in the pipeline.
    """
