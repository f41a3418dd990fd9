"""Errors of the job runtime (`ethereal-kafka run`)."""

from __future__ import annotations

from ethereal_kafka.errors import EtherealKafkaError


class JobFailedError(EtherealKafkaError):
    """A job's query failed, or the job failed while starting, for a reason that is not a framework error.

    Raised by `runtime.runner.run`; the message is one line naming the root cause (and the log folder holding the
    full trace), which the CLI prints as `error: ...` before exiting 1. Fix the cause and start the job again: it
    resumes from its checkpoint, exactly once.
    """
