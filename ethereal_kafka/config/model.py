"""Declarative, frozen configuration models: each setting is declared once, with its `.properties` key.

A model is a frozen dataclass whose fields are made with `setting(...)`. `Model.from_properties(mapping)` converts
strings to the declared types, applies defaults, rejects unknown keys naming the known ones, and collects keys under
the model's pass-through prefix (`kafka.`) into `passthrough`. Secrets are masked in `repr()` and `describe()`.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Self

from ethereal_kafka.errors import ConfigError

#: Key patterns whose values are never printed or logged.
_SECRET = re.compile(r"(password|secret|sasl\.|ssl\..*key|token|credentials|basic\.auth\.user\.info)", re.I)
MASK = "********"


def is_secret(key: str) -> bool:
    """True if the value of `key` must be masked wherever it is shown."""
    return bool(_SECRET.search(key))


def mask_mapping(values: Mapping[str, object]) -> dict[str, object]:
    """Return a copy of `values` with every secret value replaced by a mask."""
    return {k: (MASK if is_secret(k) else v) for k, v in values.items()}


#: The most candidates a did-you-mean names.
MAX_SUGGESTIONS = 3


def close_matches(word: str, candidates: Iterable[str], cutoff: float = 0.75) -> list[str]:
    """The candidates closest to `word` (a misspelt key), best first, at most `MAX_SUGGESTIONS`."""
    return difflib.get_close_matches(word, sorted(set(candidates)), n=MAX_SUGGESTIONS, cutoff=cutoff)


def did_you_mean(matches: Sequence[str]) -> str:
    """` (did you mean a?)`, ` (did you mean a or b?)`, ` (did you mean a, b or c?)`; empty without matches."""
    if not matches:
        return ""
    head = ", ".join(matches[:-1])
    return f" (did you mean {f'{head} or ' if head else ''}{matches[-1]}?)"


def setting(
    default: Any = dataclasses.MISSING,
    *,
    key: str,
    doc: str,
    choices: tuple[str, ...] | None = None,
    check: Callable[[Any], str | None] | None = None,
    secret: bool = False,
) -> Any:
    """Declare one setting of a model.

    Args:
        default: Value when the key is absent; omit to make the key required.
        key: The dotted `.properties` key.
        doc: One line for `describe()`, the docs and error messages.
        choices: Allowed string values.
        check: Returns an error text for a bad (converted) value, else None.
        secret: Mask the value in every repr and log line (keys matching secret patterns are masked anyway).
    """
    meta = {"key": key, "doc": doc, "choices": choices, "check": check, "secret": secret}
    if isinstance(default, list | dict | set):
        raise TypeError("mutable defaults are not allowed in frozen configs")
    return dataclasses.field(default=default, metadata=meta, repr=False)


def positive(value: Any) -> str | None:
    """`check` for numbers that must be > 0."""
    return None if value > 0 else "must be > 0"


def non_negative(value: Any) -> str | None:
    """`check` for numbers that must be >= 0."""
    return None if value >= 0 else "must be >= 0"


def _convert(raw: object, annotation: Any, key: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if raw is None or (isinstance(raw, str) and raw.strip() == ""):
            return None
        return _convert(raw, inner[0], key)
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    if annotation is str:
        return text
    if annotation is bool:
        lowered = text.lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
        raise ConfigError(f"{key}={raw!r}: expected true or false")
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        try:
            return annotation(text)
        except ValueError as exc:
            expected = ", ".join(str(member.value) for member in annotation)
            raise ConfigError(f"{key}={raw!r}: expected one of {expected}") from exc
    if annotation in (int, float):
        try:
            return annotation(text)
        except ValueError as exc:
            raise ConfigError(f"{key}={raw!r}: expected {annotation.__name__}") from exc
    if origin is tuple:
        return tuple(part.strip() for part in text.split(",") if part.strip())
    raise TypeError(f"unsupported setting type {annotation!r} for {key}")


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False)
class Model:
    """Base of every configuration section.

    Subclasses are frozen dataclasses declaring fields with `setting()`. Class attributes:
        SECTION: Human name used in errors ("kafka source").
        PASSTHROUGH_PREFIX: Keys starting with it are collected into `passthrough` without validation.
    """

    SECTION: ClassVar[str] = "config"
    PASSTHROUGH_PREFIX: ClassVar[str | None] = None

    passthrough: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def settings(cls) -> dict[str, dataclasses.Field[Any]]:
        """Return `{key: field}` for every declared setting, in declaration order."""
        return {f.metadata["key"]: f for f in dataclasses.fields(cls) if "key" in f.metadata}

    @classmethod
    def known_keys(cls) -> list[str]:
        """The accepted keys (plus `<prefix>*` for the pass-through prefix)."""
        keys = list(cls.settings())
        if cls.PASSTHROUGH_PREFIX:
            keys.append(f"{cls.PASSTHROUGH_PREFIX}*")
        return keys

    @classmethod
    def close_keys(cls, key: str) -> list[str]:
        """The known keys closest to `key` (a typo such as `topcs`), best first, at most `MAX_SUGGESTIONS`."""
        candidates = list(cls.settings())
        head, dot, rest = key.partition(".")
        prefix = cls.PASSTHROUGH_PREFIX
        if prefix and dot and rest and difflib.get_close_matches(head + dot, [prefix], cutoff=0.7):
            candidates.append(prefix + rest)  # `kafak.linger.ms`: the pass-through prefix misspelt
        return close_matches(key, candidates)

    @classmethod
    def suggest(cls, key: str) -> str:
        """`key`, followed by `(did you mean X?)` naming the closest known keys (at most `MAX_SUGGESTIONS`), if any."""
        return key + did_you_mean(cls.close_keys(key))

    @classmethod
    def from_properties(cls, values: Mapping[str, object], source: str = "") -> Self:
        """Build a validated, frozen instance from string (or already typed) values.

        Raises:
            ConfigError: an unknown key (the message names the closest known keys, or lists them all when none is
                close), a missing required key, a value of the wrong type or outside its choices.
        """
        where = f"{source}: " if source else ""
        declared = cls.settings()
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        passthrough: dict[str, str] = {}
        unknown: list[str] = []
        for key, raw in values.items():
            # A declared key wins over the pass-through prefix it may share (the job's `spark.master`).
            if key in declared:
                fld = declared[key]
                value = _convert(raw, hints[fld.name], f"{where}{key}")
                _validate(fld, value, f"{where}{key}")
                kwargs[fld.name] = value
            elif cls.PASSTHROUGH_PREFIX and key.startswith(cls.PASSTHROUGH_PREFIX):
                passthrough[key[len(cls.PASSTHROUGH_PREFIX) :]] = str(raw)
            else:
                unknown.append(key)
        if unknown:
            # A did-you-mean names the best few keys; only a key without one gets the whole list.
            listed = ", ".join(cls.suggest(k) for k in sorted(unknown))
            if all(cls.close_keys(k) for k in unknown):
                raise ConfigError(f"{where}unknown {cls.SECTION} key(s) {listed}")
            raise ConfigError(
                f"{where}unknown {cls.SECTION} key(s) {listed}; known keys: {', '.join(cls.known_keys())}"
            )
        missing = [
            key
            for key, fld in declared.items()
            if fld.name not in kwargs
            and fld.default is dataclasses.MISSING
            and fld.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise ConfigError(f"{where}missing required {cls.SECTION} key(s): {', '.join(missing)}")
        instance = cls(passthrough=passthrough, **kwargs)
        instance.validate()
        return instance

    def validate(self) -> None:
        """Cross-field checks; subclasses override and raise ConfigError. Called by `from_properties`."""

    def to_properties(self) -> dict[str, str]:
        """Return the settings as `.properties` strings (pass-through keys with their prefix); inverse of
        `from_properties`. Secrets are NOT masked: use `describe()` for display."""
        out: dict[str, str] = {}
        for key, fld in self.settings().items():
            value = getattr(self, fld.name)
            if value is None:
                continue
            if isinstance(value, bool):
                out[key] = "true" if value else "false"
            elif isinstance(value, tuple):
                out[key] = ",".join(value)
            else:
                out[key] = str(value)
        prefix = self.PASSTHROUGH_PREFIX or ""
        out.update({f"{prefix}{k}": v for k, v in self.passthrough.items()})
        return out

    def describe(self) -> dict[str, object]:
        """The settings as a dict with secrets masked: safe to print and log."""
        shown: dict[str, object] = {}
        for key, value in self.to_properties().items():
            fld = self.settings().get(key)
            secret = is_secret(key) or bool(fld is not None and fld.metadata.get("secret"))
            shown[key] = MASK if secret else value
        return shown

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.describe().items())
        return f"{type(self).__name__}({body})"

    __str__ = __repr__


def _validate(fld: dataclasses.Field[Any], value: Any, where: str) -> None:
    choices = fld.metadata.get("choices")
    if choices and value is not None and value not in choices:
        raise ConfigError(f"{where}={value!r}: expected one of {', '.join(choices)}")
    check = fld.metadata.get("check")
    if check is not None and value is not None:
        problem = check(value)
        if problem:
            raise ConfigError(f"{where}={value!r}: {problem}")
