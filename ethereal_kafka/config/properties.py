"""Read Java-style `.properties` files into plain string mappings, with `${ENV_VAR}` interpolation.

Supported syntax: `key=value`, `key: value`, `key value`; `#` and `!` comments; a trailing backslash continues a
line; escapes `\\t \\n \\r \\f \\\\ \\= \\: \\#` and `\\uXXXX`. `${NAME}` is replaced by the environment variable NAME,
`${NAME:-default}` falls back to `default`; `$${` is a literal `${`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ethereal_kafka.errors import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ENV = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip() if pending is not None else raw.strip()
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        out.append((start, (pending or "") + line.rstrip()))
        pending = None
    if pending is not None:
        out.append((start, pending))
    return out


def _unescape(text: str, where: str) -> str:
    result: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            result.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigError(f"{where}: malformed \\u escape")
            result.append(chr(int(digits, 16)))
            i += 6
            continue
        result.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(result)


def _split(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch.isspace():
            key = line[:i]
            rest = line[i:].lstrip()
            if (ch.isspace() and rest[:1] in ("=", ":")) or not ch.isspace():
                rest = rest[1:]
            return key, rest.lstrip()
        i += 1
    return line, ""


def interpolate(value: str, env: Mapping[str, str], where: str) -> str:
    """Replace `${NAME}` / `${NAME:-default}` in `value` from `env`.

    Raises:
        ConfigError: a referenced variable is not set and has no default.
    """

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return match.group(0)[1:]
        name, default = match.group(2), match.group(3)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: environment variable ${{{name}}} is not set")

    return _ENV.sub(substitute, value)


def parse_properties(
    text: str, source: str = "<string>", env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Parse `.properties` text into an ordered `{key: value}` dict (later duplicates win).

    Args:
        text: File contents.
        source: Name used in error messages (a path).
        env: Variables for `${...}` interpolation; defaults to `os.environ`.

    Raises:
        ConfigError: malformed escape, empty key or unset variable; the message names `source` and the line.
    """
    variables = os.environ if env is None else env
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        raw_key, raw_value = _split(line)
        key = _unescape(raw_key, where).strip()
        if not key:
            raise ConfigError(f"{where}: empty key")
        result[key] = interpolate(_unescape(raw_value, where), variables, f"{where} ({key})")
    return result


def referenced_variables(text: str, source: str = "<string>") -> dict[str, list[str]]:
    """Per key of `.properties` text, the environment variables its value reads (`${NAME}`, `${NAME:-default}`;
    a literal `$${` reads none), in order; keys that read none are left out. Nothing is interpolated, so an unset
    variable is no error here.

    Raises:
        ConfigError: a malformed escape or an empty key (as `parse_properties`).
    """
    found: dict[str, list[str]] = {}
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        raw_key, raw_value = _split(line)
        key = _unescape(raw_key, where).strip()
        if not key:
            raise ConfigError(f"{where}: empty key")
        names = [m.group(2) for m in _ENV.finditer(_unescape(raw_value, where)) if not m.group(1)]
        if names:
            found[key] = names
        else:
            found.pop(key, None)  # a later duplicate wins, as in `parse_properties`
    return found


def load_properties(path: str | Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Read and parse one `.properties` file.

    Raises:
        ConfigError: the file cannot be read or does not parse.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}") from exc
    return parse_properties(text, str(file), env)
