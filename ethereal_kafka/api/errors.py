"""Errors raised while describing or compiling a job graph."""

from __future__ import annotations

from ethereal_kafka.errors import EtherealKafkaError


class GraphError(EtherealKafkaError):
    """A job graph is invalid or uses a combination the engine cannot run.

    Raised while the graph is described (a bad argument: an unknown field, a missing output type) or when it is
    compiled into Spark queries (e.g. a stateful operator after a side-output split). Nothing has run; fix the
    pipeline function named in the message.
    """
