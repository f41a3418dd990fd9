"""Find live processes by their command-line arguments (leak checks for the JVMs the project starts)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

#: Marker put on the broker JVM's command line so a broker can be recognised (and leaks found) by `pgrep -f`.
JVM_MARKER = "-Dethereal.kafka.broker.dir="


def live_pids(matches: Callable[[list[str]], bool]) -> list[int]:
    """PIDs of live (non-zombie) processes whose argument list satisfies `matches`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and matches(args):
            pids.append(int(entry.name))
    return pids
