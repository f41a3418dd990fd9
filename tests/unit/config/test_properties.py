import pytest

from ethereal_kafka.config import parse_properties
from ethereal_kafka.errors import ConfigError


def test_separators_comments_and_continuations() -> None:
    text = """
# comment
! also a comment
a=1
b : two
c three
long = first,\\
       second
escaped\\=key = x\\ty
unicode=\\u00e9
"""
    assert parse_properties(text, env={}) == {
        "a": "1",
        "b": "two",
        "c": "three",
        "long": "first,second",
        "escaped=key": "x\ty",
        "unicode": "é",
    }


def test_env_interpolation_with_default_and_literal() -> None:
    env = {"HOST": "127.0.0.1:9092"}
    got = parse_properties("bs=${HOST}\nx=${MISSING:-fallback}\nlit=$${HOST}\n", env=env)
    assert got == {"bs": "127.0.0.1:9092", "x": "fallback", "lit": "${HOST}"}


def test_unset_variable_names_file_line_and_key() -> None:
    with pytest.raises(
        ConfigError, match=r"job.properties:2 \(b\): environment variable \$\{NOPE\} is not set"
    ):
        parse_properties("a=1\nb=${NOPE}\n", "job.properties", env={})


def test_later_duplicate_wins() -> None:
    assert parse_properties("a=1\na=2\n", env={}) == {"a": "2"}
