"""Errors of the serde layer: a bad record (`SerdeError`) versus an unusable schema registry (`RegistryError`).

A `SerdeError` is about one record and is data: the source connector routes it under its error policy (`fail`,
`skip`, `dlq`), keeping the raw bytes and the record's coordinates. A `RegistryError` is about the environment (the
registry is down, or refused a schema) and is never routed as a bad record: the task fails and Spark retries it.
"""

from __future__ import annotations

from typing import Any

from ethereal_kafka.errors import EtherealKafkaError


class SerdeError(EtherealKafkaError):
    """A record's key or value could not be deserialized, or a row could not be serialized.

    Raised by `Codec.encode` (the first bad row) and returned per row by `Codec.decode` (never raised there). The
    caller keeps the record: the source sends it to the dead-letter topic with these attributes as headers.

    Attributes:
        field: "key" or "value".
        topic: The record's topic (the target topic when serializing), or None when unknown.
        partition: The record's partition; None when serializing.
        offset: The record's offset; None when serializing.
        raw: The raw bytes that failed to decode, or the object that failed to encode.
        cause_class: Name of the original exception class (e.g. "JSONDecodeError"), or None.
        message: What went wrong, without the coordinates (`str(error)` adds them).
    """

    def __init__(
        self,
        message: str,
        *,
        field: str,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        raw: Any = None,
        cause_class: str | None = None,
    ) -> None:
        """Describe one bad record; see the class attributes."""
        self.message = message
        self.field = field
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.raw = raw
        self.cause_class = cause_class
        super().__init__(self._text())

    def _text(self) -> str:
        where = self.topic or "?"
        if self.partition is not None:
            where += f"[{self.partition}]"
        if self.offset is not None:
            where += f"@{self.offset}"
        cause = f" ({self.cause_class})" if self.cause_class else ""
        return f"{self.field} of {where}: {self.message}{cause}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments do not survive the default exception pickling; Spark ships errors between processes.
        return (
            _rebuild_serde_error,
            (self.message, self.field, self.topic, self.partition, self.offset, self.raw, self.cause_class),
        )


def _rebuild_serde_error(
    message: str,
    field: str,
    topic: str | None,
    partition: int | None,
    offset: int | None,
    raw: Any,
    cause_class: str | None,
) -> SerdeError:
    return SerdeError(
        message,
        field=field,
        topic=topic,
        partition=partition,
        offset=offset,
        raw=raw,
        cause_class=cause_class,
    )


class RegistryError(EtherealKafkaError):
    """The schema registry was unreachable after bounded retries, or refused a request that is not about a record.

    Raised by codecs built with a `registry_url` (on the driver while resolving the reader schema, on executors
    while fetching a writer schema or registering one). An unknown schema id in a record is NOT this error: that
    record gets a `SerdeError`. Check the URL and credentials (`registry_conf`), or the schema's compatibility.

    Attributes:
        url: The registry URL.
        status: The HTTP status the registry answered, or None when it could not be reached.
    """

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        """Describe the failed registry request; `message` already names the URL."""
        self.url = url
        self.status = status
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_registry_error, (str(self), self.url, self.status))


def _rebuild_registry_error(message: str, url: str, status: int | None) -> RegistryError:
    return RegistryError(message, url=url, status=status)
