"""Turn a failed run into one readable line.

Spark reports a failed query as a `StreamingQueryException` whose message nests the JVM's wrappers
(`STREAM_FAILED`, `FOREACH_BATCH_USER_FUNCTION_ERROR`, `Py4JException`) around Python tracebacks from the driver and
the executors. `root_cause` digs out the innermost error and states it in one line; the full text goes to the run's
log file (see `runtime.logs`).
"""

from __future__ import annotations

import re

from ethereal_kafka.errors import EtherealKafkaError

#: Longest reason printed; the log file has the rest.
MAX_CHARS = 600

#: Exceptions that only wrap the interesting one.
_WRAPPERS = frozenset(
    {
        "StreamingQueryException",
        "ForeachBatchUserFuncException",
        "Py4JException",
        "Py4JJavaError",
        "Py4JError",
        "PythonException",
        "SparkException",
        "ExecutionException",
        "UncheckedExecutionException",
        "InvocationTargetException",
    }
)
#: "Caused by: " starts a JVM cause; ": " starts the JVM exception under Py4J's "An error occurred while calling".
_EXCEPTION_LINE = re.compile(
    r"^(?:Caused by: |: )?(?P<name>[A-Za-z_][\w.$]*(?:Error|Exception|Exit|Failure))(?:: ?(?P<message>.*))?$"
)
_SPARK_PREFIXES = (
    re.compile(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: "),
    re.compile(r"^\[FOREACH_BATCH_USER_FUNCTION_ERROR\][^:]*?Reason: "),
    re.compile(r"^An exception was raised by the Python Proxy\. Return Message: "),
    re.compile(r"^Job aborted due to stage failure: .*?most recent failure: Lost task [^:]*: "),
)
_SQLSTATE = re.compile(r"(\s*SQLSTATE: \w+)+\s*$")


def root_cause(exc: BaseException) -> str:
    """One line naming the innermost cause of `exc` (at most `MAX_CHARS` characters).

    Called by the runner when a query or the start-up fails. A framework error (`EtherealKafkaError`) is its own
    message; anything else is `Type: message` of the innermost exception found in the chain or in the nested
    tracebacks Spark puts into messages.
    """
    innermost = _innermost(exc)
    name = type(innermost).__name__
    if isinstance(innermost, EtherealKafkaError):
        return _clip(_first_line(str(innermost)) or name)
    text = _text(innermost)
    if not any(_EXCEPTION_LINE.match(line.rstrip()) for line in text.splitlines()):
        first = _SQLSTATE.sub("", _strip_spark_prefixes(_first_line(text)))
        if name in _WRAPPERS:
            return _clip(first or name)
        return _clip(f"{name}: {first}" if first else name)
    return _clip(cause_in_text(text, default=name))


def cause_in_text(text: str, default: str = "unknown error") -> str:
    """The innermost `Type: message` in a (JVM or Python) error text, wrappers skipped; `default` if none."""
    found: tuple[str, str] | None = None
    for line in text.splitlines():
        match = _EXCEPTION_LINE.match(line.rstrip())
        if match is None:
            continue
        name = match.group("name").rsplit(".", 1)[-1].rsplit("$", 1)[-1]
        message = _strip_spark_prefixes((match.group("message") or "").strip())
        inner = _EXCEPTION_LINE.match(message)
        if inner is not None:  # "Reason: X: msg" style nesting on one line
            name = inner.group("name").rsplit(".", 1)[-1]
            message = (inner.group("message") or "").strip()
        if name in _WRAPPERS and found is not None:
            continue
        found = (name, message)
    if found is None:
        first = _strip_spark_prefixes(_first_line(text))
        return _SQLSTATE.sub("", first) or default
    name, message = found
    message = _SQLSTATE.sub("", message)
    if name == "UserFunctionError" and message.startswith("operator "):
        return message  # user code raised: the line names the operator, the user's line and the exception
    return f"{name}: {message}" if message else name


def _innermost(exc: BaseException) -> BaseException:
    """Follow `__cause__`/`__context__` to the deepest exception (a Spark wrapper stops there)."""
    seen = {id(exc)}
    current = exc
    while True:
        nxt = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
        if nxt is None or id(nxt) in seen:
            return current
        seen.add(id(nxt))
        current = nxt


def _text(exc: BaseException) -> str:
    """The exception's message with the nested details a captured Spark exception carries."""
    parts = [str(exc)]
    desc = getattr(exc, "desc", None)
    if isinstance(desc, str) and desc not in parts[0]:
        parts.append(desc)
    return "\n".join(parts)


def _strip_spark_prefixes(line: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in _SPARK_PREFIXES:
            stripped = prefix.sub("", line, count=1)
            if stripped != line:
                line, changed = stripped, True
    return line.strip()


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _clip(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 3] + "..."
