"""Schema registry access for the Avro codec: bounded retries, clear errors, one client per URL per process.

Wraps confluent-kafka's `SchemaRegistryClient` (any Confluent-compatible API: Confluent, Apicurio's `ccompat`,
Karapace; `mock://` URLs give confluent-kafka's in-process mock for tests). Transient failures (connection errors,
HTTP 408/429/5xx) are retried with exponential backoff up to `SerdeSpec.registry_attempts`; then `RegistryError`
names the URL. The client's own retries are switched off (`max.retries=0`) unless `registry_conf` sets them, so the
budget is the one the spec declares.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from ethereal_kafka.serde.errors import RegistryError

if TYPE_CHECKING:
    from ethereal_kafka.serde.spec import SerdeSpec

T = TypeVar("T")

_TRANSIENT_STATUS = frozenset({-1, 408, 429, 500, 502, 503, 504})
_CLIENTS: dict[tuple[str, tuple[tuple[str, str], ...]], SchemaRegistryClient] = {}
_LOCK = threading.Lock()


class UnknownSchemaError(LookupError):
    """The registry has no schema with the id a record names: that record is bad, the registry is fine."""


def _client(url: str, conf: Mapping[str, str]) -> SchemaRegistryClient:
    key = (url, tuple(sorted(conf.items())))
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            settings: dict[str, object] = {"url": url, "max.retries": 0}
            settings.update(conf)
            client = SchemaRegistryClient.new_client(settings)
            _CLIENTS[key] = client
        return client


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, SchemaRegistryError):
        return exc.http_status_code in _TRANSIENT_STATUS
    return not isinstance(exc, UnknownSchemaError | ValueError | TypeError)


class RegistryClient:
    """The registry calls the Avro codec makes, with retries and errors that name the URL.

    Built per codec by `registry_client(spec)`; the underlying HTTP client (and its schema cache) is shared by
    every codec of the process with the same URL and settings.
    """

    def __init__(self, url: str, conf: Mapping[str, str], attempts: int, backoff_s: float) -> None:
        """Bind to `url`; nothing is requested until a method is called."""
        self.url = url
        self._client = _client(url, conf)
        self._attempts = attempts
        self._backoff_s = backoff_s

    def schema_by_id(self, schema_id: int) -> str:
        """Return the Avro schema text registered under `schema_id`.

        Raises:
            UnknownSchemaError: the registry has no such id (HTTP 404).
            RegistryError: unreachable after the retries, or another refusal.
        """

        def call() -> str:
            try:
                schema = self._client.get_schema(schema_id)
            except SchemaRegistryError as exc:
                if exc.http_status_code == 404:
                    raise UnknownSchemaError(
                        f"schema id {schema_id} is not registered at {self.url}"
                    ) from exc
                raise
            return str(schema.schema_str)

        return self._call(f"fetching schema id {schema_id}", call)

    def latest(self, subject: str) -> tuple[int, str]:
        """Return `(schema id, schema text)` of the latest version registered under `subject`.

        Raises:
            RegistryError: no such subject, unreachable after the retries, or another refusal.
        """

        def call() -> tuple[int, str]:
            registered = self._client.get_latest_version(subject)
            if registered.schema_id is None or registered.schema is None:
                raise ValueError(f"the registry answered no schema for subject {subject!r}")
            return int(registered.schema_id), str(registered.schema.schema_str)

        return self._call(f"fetching the latest schema of subject {subject!r}", call)

    def register(self, subject: str, schema_text: str) -> int:
        """Register `schema_text` under `subject` (or find it registered) and return its id.

        Raises:
            RegistryError: the registry refused it (e.g. HTTP 409, incompatible with the subject's compatibility
                rule), or was unreachable after the retries.
        """

        def call() -> int:
            return int(self._client.register_schema(subject, Schema(schema_text, "AVRO")))

        return self._call(f"registering a schema under subject {subject!r}", call)

    def set_compatibility(self, subject: str, level: str) -> None:
        """Set the compatibility rule of `subject` ("BACKWARD", "FULL", "NONE", ...); for tests and tooling.

        Raises:
            RegistryError: refused, or unreachable after the retries.
        """

        def call() -> None:
            self._client.set_compatibility(subject_name=subject, level=level)

        self._call(f"setting the compatibility of subject {subject!r}", call)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        retrying = Retrying(
            stop=stop_after_attempt(self._attempts),
            wait=wait_exponential(multiplier=self._backoff_s, min=self._backoff_s, max=2.0),
            retry=retry_if_exception(_transient),
            reraise=False,
        )
        try:
            return retrying(call)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise RegistryError(
                f"schema registry {self.url} unreachable while {what}: {self._attempts} attempt(s) failed, "
                f"last: {type(last).__name__}: {last}",
                url=self.url,
                status=getattr(last, "http_status_code", None),
            ) from last
        except UnknownSchemaError:
            raise
        except SchemaRegistryError as exc:
            raise RegistryError(
                f"schema registry {self.url} refused {what}: {exc}", url=self.url, status=exc.http_status_code
            ) from exc
        except (ValueError, TypeError) as exc:
            raise RegistryError(f"schema registry {self.url}: {what} failed: {exc}", url=self.url) from exc


def registry_client(spec: SerdeSpec) -> RegistryClient:
    """Return a `RegistryClient` for the spec's `registry_url`, `registry_conf` and retry budget.

    Raises:
        RegistryError: the URL or settings are rejected by the client (a bad URL, an unknown setting).
    """
    if spec.registry_url is None:
        raise ValueError("the spec has no registry_url")
    try:
        return RegistryClient(
            spec.registry_url, dict(spec.registry_conf), spec.registry_attempts, spec.registry_backoff_s
        )
    except (ValueError, TypeError) as exc:
        raise RegistryError(f"schema registry {spec.registry_url}: {exc}", url=spec.registry_url) from exc
