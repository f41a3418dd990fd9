"""Errors raised while a compiled plan runs user functions inside Spark tasks."""

from __future__ import annotations

from ethereal_kafka.errors import EtherealKafkaError


class UserFunctionError(EtherealKafkaError):
    """A user function raised, or returned something that does not fit its declared output type.

    Raised inside a Spark task; the message names the operator and the element's source partition and offset.
    The query fails (the epoch is not committed) and is retried from the same offsets on restart.
    """


class OutputTypeError(UserFunctionError):
    """An element a user function produced does not fit its operator's output type: a declared field is missing, a
    field is not declared, or a value cannot be stored in its field without loss.

    Raised inside a Spark task, before the element becomes a row; the message is one line naming the operator, the
    field and the element's origin (source topic, partition and offset when known). The epoch fails and nothing of
    it is committed; fix the function or its `output_type` and restart (the epoch is retried from the same offsets).
    """
