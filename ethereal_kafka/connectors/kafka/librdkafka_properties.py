"""The configuration property names the running librdkafka knows: the candidates of a did-you-mean when it refuses a
`kafka.*` key (`kafka.fetch.max.byte`).

confluent-kafka has no call that lists them; its refusal names the key only (`No such configuration property:
"fetch.max.byte"`), and librdkafka's CONFIGURATION.md is not shipped. The library prints that very table itself
(`rd_kafka_conf_properties_show`, from which CONFIGURATION.md is generated), so it is read from the librdkafka
confluent-kafka loaded, through ctypes, once per process (~10 ms). Measured on librdkafka 2.16: 193 names, aliases
included (`bootstrap.servers`, `linger.ms`, `acks`). `rd_kafka_conf_dump` would need no file, but lists only the
properties that have a value (124 names: no `bootstrap.servers`, `group.id`, `linger.ms`, `sasl.password`), so it
is not used. Where the library cannot be found or read (a platform without /proc and without a shared librdkafka
on the library path), the list is empty and a refusal comes without a suggestion.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import tempfile

_ROW = re.compile(r"^([A-Za-z0-9_.]+)\s+\|\s*[*CP]\s*\|", re.MULTILINE)


@functools.cache
def known_properties() -> frozenset[str]:
    """Every global and topic property name of the librdkafka this process uses (empty when it cannot be read).

    Never raises: a did-you-mean is a courtesy.
    """
    try:
        return frozenset(_ROW.findall(_properties_table()))
    except (OSError, AttributeError, ValueError):
        return frozenset()


def _properties_table() -> str:
    """The text `rd_kafka_conf_properties_show` prints (CONFIGURATION.md's tables).

    Raises:
        OSError: no librdkafka of the version confluent-kafka uses was found, or the table could not be written.
        AttributeError: a symbol is missing.
    """
    import confluent_kafka

    path = _library_path()
    if path is None:
        raise OSError("librdkafka not found")
    library = ctypes.CDLL(path)
    library.rd_kafka_version.restype = ctypes.c_int
    if library.rd_kafka_version() != confluent_kafka.libversion()[1]:
        raise OSError(f"{path} is not the librdkafka confluent-kafka uses")
    libc = ctypes.CDLL(None)
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    library.rd_kafka_conf_properties_show.argtypes = [ctypes.c_void_p]
    with tempfile.TemporaryFile() as table:
        stream = libc.fdopen(os.dup(table.fileno()), b"w")
        if not stream:
            raise OSError("fdopen failed")
        library.rd_kafka_conf_properties_show(stream)
        libc.fclose(stream)
        table.seek(0)
        return table.read().decode("utf-8", errors="replace")


def _library_path() -> str | None:
    """The librdkafka file confluent-kafka loaded (Linux: from /proc/self/maps), else a shared one by name."""
    import confluent_kafka.cimpl  # noqa: F401  (loads librdkafka into this process)

    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and "librdkafka" in os.path.basename(fields[5].strip()):
                    return fields[5].strip()
    except OSError:
        pass
    return ctypes.util.find_library("rdkafka")
