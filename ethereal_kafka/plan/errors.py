"""Errors raised while a compiled plan runs user functions inside Spark tasks, and how they name the user's code."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from ethereal_kafka.errors import EtherealKafkaError


class UserFunctionError(EtherealKafkaError):
    """A user function raised, or returned something that does not fit its declared output type.

    Raised inside a Spark task; the message names the operator and the element's source partition and offset.
    The query fails (the epoch is not committed) and is retried from the same offsets on restart.

    Attributes:
        location: Where the user's code raised (`user_error`), when known.
        cause_class, cause_message: What it raised.
    """

    location: CodeLocation | None = None
    cause_class: str = ""
    cause_message: str = ""


class OutputTypeError(UserFunctionError):
    """An element a user function produced does not fit its operator's output type: a declared field is missing, a
    field is not declared, or a value cannot be stored in its field without loss.

    Raised inside a Spark task, before the element becomes a row; the message is one line naming the operator, the
    field and the element's origin (source topic, partition and offset when known). The epoch fails and nothing of
    it is committed; fix the function or its `output_type` and restart (the epoch is retried from the same offsets).
    """


@dataclass(frozen=True)
class CodeLocation:
    """Where user code raised: the last frame of a traceback that is the user's (not the framework's, PySpark's,
    the standard library's or an installed package's; `user_location`).

    Attributes:
        path: The source file.
        line: The line number.
        function: The function's name.
    """

    path: str
    line: int
    function: str

    @property
    def short(self) -> str:
        """`file.py:57`: the file's name and the line, as the one-line error shows them."""
        return f"{os.path.basename(self.path)}:{self.line}"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def _roots() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Folders of (framework, standard library, installed packages); the framework's examples and demo count as
    user code (they are pipelines)."""
    import sysconfig

    import ethereal_kafka

    framework = [os.path.abspath(p) for p in ethereal_kafka.__path__][:1]
    for name in ("pyspark", "py4j", "cloudpickle", "pyarrow", "pandas"):
        module = sys.modules.get(name)
        location = getattr(module, "__file__", None)
        if location:
            framework.append(os.path.dirname(os.path.abspath(location)))
    paths = sysconfig.get_paths()
    stdlib = tuple(os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib") if k in paths)
    installed = tuple(os.path.abspath(paths[k]) for k in ("purelib", "platlib") if k in paths)
    return tuple(framework), stdlib, installed


_USER_FOLDERS_IN_FRAMEWORK = (os.sep + "examples" + os.sep, os.sep + "demo" + os.sep)


def user_location(exc: BaseException) -> CodeLocation | None:
    """The user's frame an exception comes from: the last frame of its traceback in the user's own code (a call
    into a library, such as `json.loads`, is shown at the user's line that made it). When no frame is the user's
    own (a pipeline installed as a package), the last frame outside the framework and the standard library; None
    without a traceback.

    Called where the framework calls user functions (on executors), when one raised.
    """
    import traceback

    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if not frames:
        return None
    framework, stdlib, installed = _roots()

    def inside(path: str, roots: tuple[str, ...]) -> bool:
        return any(path == r or path.startswith(r + os.sep) for r in roots)

    def framework_frame(path: str) -> bool:
        if inside(path, framework[:1]):
            return not any(part in path for part in _USER_FOLDERS_IN_FRAMEWORK)
        return inside(path, framework[1:])

    tiers = (
        lambda p: not framework_frame(p) and not inside(p, stdlib) and not inside(p, installed),
        lambda p: not framework_frame(p) and not inside(p, stdlib),
    )
    for keep in tiers:
        for frame in reversed(frames):
            path = os.path.abspath(frame.filename)
            if not frame.filename.startswith("<frozen") and keep(path):
                return CodeLocation(path, frame.lineno or 0, frame.name)
    return None


def user_error(operator: object, exc: BaseException, where: str = "") -> UserFunctionError:
    """The error of user code that raised: one line, `operator 'detect-fraud' (uid fraud-1) at fraud.py:57:
    ZeroDivisionError: division by zero; <where>` (`where`: the element's origin, the key, the timer). Raise it
    `from exc`.

    Args:
        operator: The operator (`graph.OperatorRef`, or its label).
        exc: What the user's code raised.
        where: What it was called with, for people (`element from topic t partition 0 offset 5`).
    """
    location = user_location(exc)
    text = " ".join(str(exc).split())
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    at = f" at {location.short}" if location is not None else ""
    error = UserFunctionError(f"operator {operator}{at}: {reason}{f'; {where}' if where else ''}")
    error.location = location
    error.cause_class = type(exc).__name__
    error.cause_message = text
    return error


#: How a user-code error's line starts (`user_error`), with the operator's name, uid and `kind#id` as groups.
_OPERATOR_LINE = re.compile(
    r"operator (?:'(?P<name>[^'\n]+)' \((?:uid (?P<uid>[^)\s]+)|(?P<auto1>[a-z_]+#\d+))\)"
    r"|(?P<auto2>[a-z_]+#\d+)(?: \(uid (?P<uid2>[^)\s]+)\))?)(?: at [^:\s]+:\d+)?: "
)


def failed_operator(text: str) -> dict[str, str] | None:
    """The operator a user-code error names in `text` (a Spark failure's text holding a `user_error` line):
    `{"name": display name, "uid": stable id}`, or None when the text holds no such line. Used to name the
    operator in the checkpoint history."""
    found = _OPERATOR_LINE.search(text)
    if found is None:
        return None
    auto = found.group("auto1") or found.group("auto2") or ""
    uid = found.group("uid") or found.group("uid2") or auto
    return {"name": found.group("name") or auto, "uid": uid}


def user_error_line(text: str) -> str | None:
    """The one-line message of the user-code error in `text` (a Spark failure's text), or None."""
    marker = "UserFunctionError: "
    for line in reversed(text.splitlines()):
        at = line.find(marker)
        if at >= 0 and line[at + len(marker) :].startswith("operator "):
            return line[at + len(marker) :].strip()
    return None
