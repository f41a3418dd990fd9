"""Whose broker is it: `broker start` never replaces a broker (or takes a port) this user did not start.

A local broker's state directory is per user by default (`<cache>/brokers/<name>`, `paths.cache_home`), but an
explicit `--state-dir` or a shared `ETHEREAL_KAFKA_HOME` may point two users (or two test runs) at the same one.
`LocalBroker.start` asks this module, before it starts anything:

- `refuse_foreign`: the state directory belongs to another user, or a broker JVM runs from it that is not the one
  its `state.json` records (someone else's start) or runs as another user: one-line `BrokerError`.
- `start_lock`: two starts of the same state directory by one user run one after the other (the second finds the
  first's broker running and returns it) instead of launching two JVMs over one data directory.
- `port_holder`: who holds a busy port (another user's process, another ethereal-kafka broker, a pid), for the
  one-line error naming it.

Linux only (`/proc`), like the rest of the local broker.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

from ethereal_kafka.broker.procs import JVM_MARKER, live_pids
from ethereal_kafka.errors import BrokerError

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def user_name(uid: int) -> str:
    """`name (uid N)`, or `uid N` when the uid has no passwd entry."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def process_uid(pid: int) -> int | None:
    """The real uid of a live process, None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def brokers_running_in(state_dir: Path) -> list[int]:
    """PIDs of live broker JVMs started over `state_dir` (by anyone: found by their command-line marker)."""
    marker = f"{JVM_MARKER}{state_dir}"
    return live_pids(lambda args: marker in args)


def refuse_foreign(state_dir: Path, recorded_pid: int | None) -> None:
    """Raise unless starting (or stopping) the broker of `state_dir` touches only what this user started.

    Called by `LocalBroker.start` before anything else (no Java needed) and by `LocalBroker.stop`.

    Args:
        state_dir: The broker's state directory.
        recorded_pid: The pid its `state.json` records (None when none).

    Raises:
        BrokerError: one line naming the directory, the pid and the user it belongs to.
    """
    me = os.geteuid()
    try:
        owner = state_dir.stat().st_uid
    except OSError:
        owner = me  # not created yet: it will be ours
    if owner != me:
        raise BrokerError(
            f"the broker state directory {state_dir} belongs to {user_name(owner)}: refusing to start or replace "
            "a broker you did not start; use your own (--name, --state-dir, or the default under your cache)"
        )
    for pid in brokers_running_in(state_dir):
        uid = process_uid(pid)
        if uid is not None and uid != me:
            raise BrokerError(
                f"a broker of {user_name(uid)} runs from {state_dir} (pid {pid}): refusing to start or replace a "
                "broker you did not start; choose another --state-dir"
            )
        if pid != recorded_pid:
            raise BrokerError(
                f"a broker this state does not record runs from {state_dir} (pid {pid}, state.json names "
                f"{recorded_pid or 'none'}): refusing to start a second one over its data; stop it (kill {pid}) "
                "or choose another --state-dir"
            )


@contextlib.contextmanager
def start_lock(state_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on `state_dir` for the `with` block: one start at a time per state directory.

    Blocks while another process holds it (its start ends within its start timeout); released on exit, and by the
    kernel when the holder dies.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / "start.lock").open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def port_holder(port: int) -> str | None:
    """Who listens on TCP `port` (any local address): "another user's process (...)", "the ethereal-kafka broker in
    <dir> (pid P)", "pid P (<command>)", or None when no listener is visible."""
    inodes: dict[int, int] = {}  # socket inode -> uid
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes[int(cols[9])] = int(cols[7])
    if not inodes:
        return None
    me = os.geteuid()
    for uid in inodes.values():
        if uid != me:
            return f"another user's process, {user_name(uid)}"
    pid = _pid_of_sockets(set(inodes))
    if pid is None:
        return None
    args = _args(pid)
    for arg in args:
        if arg.startswith(JVM_MARKER):
            return f"the ethereal-kafka broker in {arg[len(JVM_MARKER) :]}, pid {pid}"
    return f"pid {pid}, {Path(args[0]).name if args else '?'}"


def _pid_of_sockets(inodes: set[int]) -> int | None:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in wanted:
                        return int(entry.name)
    return None


def _args(pid: int) -> list[str]:
    try:
        return [
            a for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if a
        ]
    except OSError:
        return []
