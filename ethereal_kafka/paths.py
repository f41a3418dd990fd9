"""Where ethereal-kafka keeps its per-user files (broker jars and state, app records, epoch histories, run logs), and
how a file is made durable."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    """Return the ethereal-kafka cache directory (`$ETHEREAL_KAFKA_HOME`, else `$XDG_CACHE_HOME/ethereal-kafka`,
    else `~/.cache/ethereal-kafka`)."""
    env = os.environ.get("ETHEREAL_KAFKA_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "ethereal-kafka"


def fsync_path(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to stable storage.

    Raises:
        OSError: the path cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically and durably: a temporary file beside it, flushed, renamed over it, and
    the folder's entry flushed. A crash leaves the old content or the new, never a partial file or a lost one.

    Raises:
        OSError: the folder cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    with open(partial, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, path)
    fsync_path(path.parent)
