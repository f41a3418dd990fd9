"""Errors of the plain Kafka tools (topic administration, producing and consuming records from the command line)."""

from __future__ import annotations

from ethereal_kafka.errors import EtherealKafkaError


class TopicError(EtherealKafkaError):
    """A topic request was refused or cannot be made: the topic exists (create), does not exist (describe, delete,
    produce, consume), a partition it does not have, or the broker refused its settings (a bad `--config`, a
    replication factor above the brokers there are).

    Raised by `connectors.kafka.topic_admin` and `console_io` before or instead of the change; the message names
    the topic and the cluster. Fix the named argument and retry.
    """


class RecordInputError(EtherealKafkaError):
    """An input line cannot become a record: no key separator on it, JSON that does not parse or is not an object,
    a field of the wrong type.

    Raised by `connectors.kafka.console` while reading the lines `ethereal-kafka produce` sends; the message names
    the input (`FILE:LINE` or `<stdin>:LINE`). Under a transaction nothing of the input was made visible.
    """


class ProduceError(EtherealKafkaError):
    """The cluster did not take every record: a delivery failed (a record too large, the topic deleted meanwhile) or
    the transaction could not commit.

    Raised by `connectors.kafka.console_io.produce_records`; the message names the topic, how many records were
    acknowledged, and the first error. Under a transaction nothing was made visible.
    """
