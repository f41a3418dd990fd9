"""Errors of the Kafka sink's transactional commit (raised inside sink tasks, reported by the coordinator)."""

from __future__ import annotations

from ethereal_kafka.errors import EtherealKafkaError


class FencedError(EtherealKafkaError):
    """Another instance of the same app.id took over (its start fenced this one's transactional ids).

    Raised by a sink task or the coordinator; the job must stop. Run one instance per app.id.
    """


class TransactionError(EtherealKafkaError):
    """A sink transaction could not be committed after bounded retries; the epoch's output is not visible.

    Spark fails the epoch; a restart replays it.
    """
