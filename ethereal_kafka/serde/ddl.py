"""Spark DDL <-> Arrow types, in pure Python: executors decode JSON without a JVM.

`parse_ddl("order_id long, customer string")` returns the Arrow struct those fields make; `spark_field_list` and
`spark_type` go the other way and produce strings `StructType.fromDDL` accepts. Every Arrow field is nullable
(`NOT NULL` is accepted and ignored): a record with a missing field decodes to null rather than failing the batch.
"""

from __future__ import annotations

import re

import pyarrow as pa

__all__ = ["DdlError", "parse_ddl", "parse_type", "spark_field_list", "spark_type"]

_UTC = "UTC"

_SIMPLE: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz=_UTC),
    "timestamp_ltz": pa.timestamp("us", tz=_UTC),
    "timestamp_ntz": pa.timestamp("us"),
}

_TOKEN = re.compile(
    r"\s*(?:(?P<quoted>`(?:[^`]|``)*`)|(?P<string>'(?:[^'\\]|\\.)*')|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>\d+)|(?P<punct>[<>(),:]))"
)


class DdlError(ValueError):
    """A Spark DDL string could not be parsed; the message names the position and what was expected.

    A `ValueError`, because it is a bad argument; `serde.codecs.build_codec` turns it into a `ConfigError`.
    """


class _Tokens:
    def __init__(self, text: str) -> None:
        self.text = text
        self.items: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                raise DdlError(f"unexpected character {text[pos:].strip()[:1]!r} at {pos} in {text!r}")
            kind = match.lastgroup or ""
            self.items.append((kind, match.group(kind), match.start(kind)))
            pos = match.end()
        self.index = 0

    def peek(self) -> str | None:
        return self.items[self.index][1] if self.index < len(self.items) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.index >= len(self.items):
            raise DdlError(
                f"unexpected end of {self.text!r}" + (f", expected {expected!r}" if expected else "")
            )
        kind, value, pos = self.items[self.index]
        if expected is not None and value.lower() != expected:
            raise DdlError(f"expected {expected!r} at {pos} in {self.text!r}, got {value!r}")
        self.index += 1
        return kind, value

    def done(self) -> bool:
        return self.index >= len(self.items)


def parse_ddl(ddl: str) -> pa.StructType:
    """Parse a Spark DDL field list ("a bigint, `b c` struct<x:int>") into a nullable Arrow struct type.

    Also accepts a whole `struct<...>` type. Field names may be backquoted (a doubled backquote escapes one);
    `NOT NULL` and `COMMENT '...'` are accepted and ignored.

    Raises:
        DdlError: the text is not a field list of supported types (the message says where).
    """
    tokens = _Tokens(ddl)
    if tokens.peek() is not None and tokens.peek().lower() == "struct" and _looks_like_struct(tokens):  # type: ignore[union-attr]
        result = _parse_type(tokens)
        if not tokens.done():
            raise DdlError(f"unexpected {tokens.peek()!r} after the struct in {ddl!r}")
        assert isinstance(result, pa.StructType)
        return result
    fields = _parse_fields(tokens, end=None)
    if not tokens.done():
        raise DdlError(f"unexpected {tokens.peek()!r} in {ddl!r}")
    if not fields:
        raise DdlError("an empty DDL string declares no fields")
    return pa.struct(fields)


def parse_type(ddl_type: str) -> pa.DataType:
    """Parse one Spark type ("array<map<string,double>>", "decimal(10,2)") into an Arrow type.

    Raises:
        DdlError: not a supported Spark type.
    """
    tokens = _Tokens(ddl_type)
    result = _parse_type(tokens)
    if not tokens.done():
        raise DdlError(f"unexpected {tokens.peek()!r} after the type in {ddl_type!r}")
    return result


def _looks_like_struct(tokens: _Tokens) -> bool:
    return len(tokens.items) > 1 and tokens.items[1][1] == "<"


def _parse_fields(tokens: _Tokens, end: str | None) -> list[pa.Field]:
    fields: list[pa.Field] = []
    names: set[str] = set()
    while tokens.peek() is not None and tokens.peek() != end:
        kind, raw_name = tokens.take()
        if kind == "quoted":
            name = raw_name[1:-1].replace("``", "`")
        elif kind == "word":
            name = raw_name
        else:
            raise DdlError(f"expected a field name in {tokens.text!r}, got {raw_name!r}")
        if tokens.peek() == ":":
            tokens.take(":")
        field_type = _parse_type(tokens)
        _skip_modifiers(tokens)
        if name in names:
            raise DdlError(f"field {name!r} is declared twice in {tokens.text!r}")
        names.add(name)
        fields.append(pa.field(name, field_type, nullable=True))
        if tokens.peek() == ",":
            tokens.take(",")
        elif tokens.peek() != end:
            raise DdlError(f"expected ',' after field {name!r} in {tokens.text!r}, got {tokens.peek()!r}")
    return fields


def _skip_modifiers(tokens: _Tokens) -> None:
    while tokens.peek() is not None and tokens.peek().lower() in ("not", "comment"):  # type: ignore[union-attr]
        _, word = tokens.take()
        if word.lower() == "not":
            tokens.take("null")
        else:
            kind, _ = tokens.take()
            if kind != "string":
                raise DdlError(f"COMMENT needs a quoted string in {tokens.text!r}")


def _parse_type(tokens: _Tokens) -> pa.DataType:
    kind, word = tokens.take()
    name = word.lower()
    if kind != "word":
        raise DdlError(f"expected a type name in {tokens.text!r}, got {word!r}")
    if name in _SIMPLE:
        return _SIMPLE[name]
    if name in ("varchar", "char"):
        tokens.take("(")
        tokens.take()
        tokens.take(")")
        return pa.string()
    if name in ("decimal", "dec", "numeric"):
        return _parse_decimal(tokens)
    if name == "array":
        tokens.take("<")
        item = _parse_type(tokens)
        tokens.take(">")
        return pa.list_(item)
    if name == "map":
        tokens.take("<")
        key = _parse_type(tokens)
        tokens.take(",")
        value = _parse_type(tokens)
        tokens.take(">")
        return pa.map_(key, value)
    if name == "struct":
        tokens.take("<")
        fields = _parse_fields(tokens, end=">")
        tokens.take(">")
        return pa.struct(fields)
    raise DdlError(f"unsupported Spark type {word!r} in {tokens.text!r}")


def _parse_decimal(tokens: _Tokens) -> pa.DataType:
    precision, scale = 10, 0
    if tokens.peek() == "(":
        tokens.take("(")
        precision = _number(tokens)
        if tokens.peek() == ",":
            tokens.take(",")
            scale = _number(tokens)
        tokens.take(")")
    if not 1 <= precision <= 38 or not 0 <= scale <= precision:
        raise DdlError(f"decimal({precision},{scale}) is out of range in {tokens.text!r}")
    return pa.decimal128(precision, scale)


def _number(tokens: _Tokens) -> int:
    kind, value = tokens.take()
    if kind != "number":
        raise DdlError(f"expected a number in {tokens.text!r}, got {value!r}")
    return int(value)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_type(arrow_type: pa.DataType) -> str:
    """Return the Spark DDL of one Arrow type (the inverse of `parse_type` for the types it produces).

    Raises:
        DdlError: an Arrow type with no Spark equivalent here (e.g. unsigned integers, time types).
    """
    t = arrow_type
    if pa.types.is_struct(t):
        inner = ",".join(f"{_quote(f.name)}:{spark_type(f.type)}" for f in t)
        return f"struct<{inner}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{spark_type(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{spark_type(t.key_type)},{spark_type(t.item_type)}>"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    names = {
        pa.bool_(): "boolean",
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.binary(): "binary",
        pa.large_binary(): "binary",
        pa.date32(): "date",
    }
    if t in names:
        return names[t]
    raise DdlError(f"Arrow type {t} has no Spark equivalent")


def spark_field_list(arrow_type: pa.DataType) -> str:
    """Return the Spark DDL of a codec's type: "`a` bigint, `b` string" for a struct, else the type itself."""
    if pa.types.is_struct(arrow_type):
        return ", ".join(f"{_quote(f.name)} {spark_type(f.type)}" for f in arrow_type)
    return spark_type(arrow_type)
