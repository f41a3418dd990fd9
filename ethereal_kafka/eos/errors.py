"""Errors of the exactly-once protocol: a fenced instance, a transaction that could not commit, a start that
cannot resume safely, an epoch refused because the job is stopping."""

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


class RecoveryError(EtherealKafkaError):
    """The job cannot resume safely (for instance: a stateful job whose Spark checkpoint is gone).

    The message says how to proceed (restore the checkpoint, or replay from an explicit position).
    """


class EpochRefusedError(EtherealKafkaError):
    """The job is stopping: an epoch that had not started writing was refused by the epoch gate (`eos.gate`).

    Raised to Spark from the `foreachBatch` call of that epoch. Nothing of it was written and Spark replays it on the
    next start; the runner treats it as part of the requested stop, never as a failure.
    """
