"""Errors of an app's local records and of replays: who runs an app, what is known about it."""

from __future__ import annotations

from ethereal_kafka.errors import EtherealKafkaError


class ReplayError(EtherealKafkaError):
    """A replay cannot be planned or applied as asked: a malformed `--from`, an offset outside a partition's
    retained range, a partition the job does not read, a checkpoint that is not a local folder, a missing target
    topic, or a confirmation that was not given.

    Raised by `ethereal-kafka replay` before anything changes (except where the message says what did). Fix the
    named argument and retry.
    """


class AppRunningError(ReplayError):
    """An instance of the app is (or may be) running, so its offsets and checkpoint must not be reset.

    Raised by `ethereal-kafka replay` when this host's run lock is held, or when the app was last claimed by an
    instance this host did not start (pass `--force` once you have made sure it stopped).
    """


class AppNotFoundError(EtherealKafkaError):
    """No job is known under an app id on this host (`ethereal-kafka run` records each job when it starts).

    Raised by `offsets APP` and `replay APP`; pass `--job FILE` to name the job file instead.
    """
