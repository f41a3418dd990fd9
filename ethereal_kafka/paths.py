"""Where ethereal-kafka keeps its per-user files (broker jars and state, app records, epoch histories, run logs)."""

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
