"""Records as text, both ways: the input lines `ethereal-kafka produce` sends and the lines `consume` prints.

Pure conversions, no Kafka client (`console_io` does the I/O).

Input, one record per line (blank lines are skipped):

* text: the line is the value; with a key separator, the text before the first separator is the key
  (`alice:{"amount": 80}` with `--key-separator :`), as kafka-console-producer's `parse.key`;
* JSON lines: an object `{"key": ..., "value": ..., "headers": {...} | [[name, value], ...], "partition": n,
  "timestamp": ms}`, every field optional. A string key or value is sent as its UTF-8 text, any other JSON value
  (an object, a number) as its compact JSON text, null as null (a tombstone value); `key_base64` / `value_base64`
  carry bytes that are not text (what `consume --json` prints for them).

Output, one line per record (`render`): the value, optionally after the headers and the key (`--headers`, `--keys`,
joined by a separator, a tab by default); or (`json`) an object per line with topic, partition, offset, timestamp,
key, value and headers (`[[name, value], ...]`), which `produce --json` reads back unchanged; or (`pretty`) that
object indented, with a key or value that is JSON shown as JSON and the headers as an object (unless a name
repeats).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ethereal_kafka.connectors.kafka.errors import RecordInputError

Headers = tuple[tuple[str, bytes | None], ...]

#: How `render` prints a record.
FORMATS = ("text", "json", "pretty")


@dataclass(frozen=True)
class ConsoleRecord:
    """A record to produce.

    Attributes:
        partition: The partition to write to, or None for the producer's partitioner (by key).
        timestamp_ms: The record's timestamp, or None for the time it is produced.
    """

    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    partition: int | None = None
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class Start:
    """Where `consume` starts reading each partition (`parse_start`).

    Attributes:
        kind: `earliest`, `latest`, `offset` (at `value`), `back` (`value` records before the end) or `timestamp`
            (the first record at or after `value` ms).
    """

    kind: str
    value: int = 0


def parse_start(text: str) -> Start:
    """A `--from` argument: `earliest`, `latest`, an offset `N`, `-N` (the last N records of each partition) or
    `timestamp:MS`.

    Raises:
        RecordInputError: anything else.
    """
    spec = text.strip()
    if spec in ("earliest", "latest"):
        return Start(spec)
    kind, number = (
        ("timestamp", spec.removeprefix("timestamp:")) if spec.startswith("timestamp:") else ("", spec)
    )
    try:
        value = int(number)
    except ValueError:
        raise RecordInputError(
            f"--from {text!r}: expected earliest, latest, an offset N, -N (the last N) or timestamp:MS"
        ) from None
    if kind:
        if value < 0:
            raise RecordInputError(f"--from {text!r}: a timestamp is milliseconds since 1970, >= 0")
        return Start(kind, value)
    return Start("back", -value) if value < 0 else Start("offset", value)


def parse_header(text: str) -> tuple[str, bytes]:
    """`name=value` (a `--header` argument) as a header; the value may contain `=`.

    Raises:
        RecordInputError: no `=` or an empty name.
    """
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise RecordInputError(f"--header {text!r}: expected NAME=VALUE")
    return name, value.encode()


def read_records(
    lines: Iterable[str],
    source: str,
    json_lines: bool = False,
    key_separator: str | None = None,
    headers: Headers = (),
    partition: int | None = None,
) -> Iterator[ConsoleRecord]:
    """The records of `lines`, one per non-blank line, lazily (a line is read when its record is asked for).

    Args:
        lines: Input lines (with or without their newline).
        source: Names the input in errors (`orders.txt`, `<stdin>`).
        json_lines: Each line is a JSON object (see the module docstring); else text.
        key_separator: Text lines: the key ends at the first occurrence of it (a line without it is an error).
        headers: Added to every record (before a JSON line's own).
        partition: The partition of every record that does not name its own.

    Raises:
        RecordInputError: a line that cannot become a record, named `source:line`.
    """
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        where = f"{source}:{number}"
        if json_lines:
            yield _json_record(line, where, headers, partition)
        elif key_separator is not None:
            key, found, value = line.partition(key_separator)
            if not found:
                raise RecordInputError(f"{where}: no key separator {key_separator!r} in the line")
            yield ConsoleRecord(key.encode(), value.encode(), headers, partition)
        else:
            yield ConsoleRecord(None, line.encode(), headers, partition)


def _json_record(line: str, where: str, headers: Headers, partition: int | None) -> ConsoleRecord:
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise RecordInputError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise RecordInputError(
            f"{where}: expected a JSON object with key, value, headers, partition, timestamp"
        )
    unknown = set(raw) - {"key", "value", "key_base64", "value_base64", "headers", "partition", "timestamp"}
    unknown -= {"topic", "offset"}  # what `consume --json` prints beside them
    if unknown:
        raise RecordInputError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    own = raw.get("partition", partition)
    stamp = raw.get("timestamp")
    for name, value in (("partition", own), ("timestamp", stamp)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise RecordInputError(f"{where}: {name} must be a non-negative integer, not {value!r}")
    return ConsoleRecord(
        _payload(raw, "key", where),
        _payload(raw, "value", where),
        headers + _headers(raw.get("headers"), where),
        own,
        stamp,
    )


def _payload(raw: Mapping[str, Any], field: str, where: str) -> bytes | None:
    if f"{field}_base64" in raw:
        try:
            return base64.b64decode(str(raw[f"{field}_base64"]), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RecordInputError(f"{where}: {field}_base64 is not base64") from exc
    value = raw.get(field)
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _headers(raw: Any, where: str) -> Headers:
    if raw is None:
        return ()
    pairs: Iterable[Any] = raw.items() if isinstance(raw, dict) else raw
    out: list[tuple[str, bytes | None]] = []
    try:
        for name, value in pairs:
            if not isinstance(name, str) or not (value is None or isinstance(value, str)):
                raise TypeError
            out.append((name, None if value is None else value.encode()))
    except (TypeError, ValueError) as exc:
        raise RecordInputError(
            f'{where}: headers must be {{"name": "value", ...}} or [["name", "value"], ...]'
        ) from exc
    return tuple(out)


def render(
    record: Any,
    fmt: str = "text",
    keys: bool = False,
    headers: bool = False,
    separator: str = "\t",
) -> str:
    """One record (a `topics.ReadRecord`: topic, partition, offset, key, value, timestamp_ms, headers) as `consume`
    prints it; see the module docstring. `keys`/`headers` apply to the text format (json and pretty show all)."""
    if fmt == "text":
        parts = []
        if headers:
            parts.append(",".join(f"{name}={_text(value)}" for name, value in record.headers))
        if keys:
            parts.append(_text(record.key))
        parts.append(_text(record.value))
        return separator.join(parts)
    pretty = fmt == "pretty"
    document: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
    }
    document.update(_field("key", record.key, pretty))
    document.update(_field("value", record.value, pretty))
    pairs = [[name, _decoded(value)] for name, value in record.headers]
    names = [name for name, _ in pairs]
    if pretty and len(set(names)) == len(names):
        document["headers"] = dict(pairs)  # easier to read; a repeated name needs the pairs
        return json.dumps(document, indent=2, ensure_ascii=False)
    document["headers"] = pairs
    if pretty:
        return json.dumps(document, indent=2, ensure_ascii=False)
    return json.dumps(document, ensure_ascii=False)


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def _decoded(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _field(name: str, data: bytes | None, pretty: bool) -> dict[str, Any]:
    """`{name: text}`, `{name: JSON}` (pretty, when it parses) or `{name_base64: ...}` for bytes that are not
    UTF-8."""
    if data is None:
        return {name: None}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode("ascii")}
    if pretty:
        try:
            return {name: json.loads(text)}
        except ValueError:
            pass
    return {name: text}
