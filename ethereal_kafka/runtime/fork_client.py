"""The launcher side of the fork server (`runtime.fork_server`), run as a script (the server imports
only its wire format from here).

    python -I -S fork_client.py SOCKET -m MODULE [ARG...]

Spark starts this process where it would start `python -m MODULE` (the session's launcher script execs it for
the modules the server forks, `fork_server.ROUTED`). It hands its standard streams (the pipes Spark reads), working directory,
arguments and environment to the fork server at `SOCKET`, which forks a child that runs `MODULE` as `__main__`
with them; then it stands in for that child: SIGTERM and SIGHUP are passed on to it, and it exits with
the child's status (`128 + n` for a child ended by signal n, as a shell reports it). Closing the connection (this
process killed) makes the server kill the child.

When the server cannot be reached (it exited, or did not bind its socket within `BIND_WAIT_S`), this process becomes `python -m MODULE`
itself (exec of this interpreter): the runner then starts as Spark would start it without the server.

Only the standard library is imported (`-I -S`: neither the environment's `PYTHON*` settings nor site-packages
are read, ~10 ms to start).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import time

#: Request: a 4-byte big-endian length, then that many bytes of JSON `{"argv", "cwd", "env"}`, with fds 0, 1 and 2
#: attached to its first bytes (`SCM_RIGHTS`). Replies: the child's pid, later its exit status (each `!i`), or
#: `LET_GO`.
LENGTH = struct.Struct("!I")
REPLY = struct.Struct("!i")
#: The status of a child the server ended on the driver's word (`fork_server.release_planners`): this process
#: stays, standing in for a daemon that is gone, until Spark stops it (SIGTERM, SIGHUP) or Spark's JVM exits.
LET_GO = -(1 << 31)
#: How often a let-go client checks that the JVM that started it still runs.
PARENT_POLL_S = 1.0
#: How long a runner waits for a server that has not bound its socket yet (it binds before its imports).
BIND_WAIT_S = 3.0


def _receive(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        try:
            chunk = conn.recv(size - len(data))
        except InterruptedError:
            continue
        if not chunk:
            return None
        data += chunk
    return data


def _fallback(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *argv])


def main(argv: list[str]) -> int:
    path, command = argv[0], argv[1:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + BIND_WAIT_S
    while True:
        try:
            conn.connect(path)
            break
        except FileNotFoundError:  # not bound yet: the server was started a moment ago
            if time.monotonic() < deadline:
                time.sleep(0.01)
                continue
            conn.close()
            _fallback(command)
        except OSError:  # bound by a server that is gone
            conn.close()
            _fallback(command)
    # From here on a signal is the child's: passed on once its pid is known, kept until then (the child may run
    # before this process reads its pid, and Spark may stop it at any moment).
    child: list[int] = []
    pending: list[int] = []

    def _pass_on(signum: int, _frame: object) -> None:
        if not child:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child[0], signum)

    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _pass_on)
    request = json.dumps(
        {
            "argv": command,
            "cwd": os.getcwd(),
            "env": {os.fsdecode(k): os.fsdecode(v) for k, v in os.environb.items()},
        }
    ).encode("utf-8", "surrogateescape")
    try:
        socket.send_fds(conn, [LENGTH.pack(len(request)) + request], [0, 1, 2])
        pid_bytes = _receive(conn, REPLY.size)
    except OSError:
        pid_bytes = None
    if pid_bytes is None:  # the server went away before it forked: start the runner here instead
        conn.close()
        if pending:  # stopped meanwhile: as the runner would have been
            return 128 + pending[0]
        # An ignored signal stays ignored across exec: give the runner the disposition this process had.
        signal.signal(signal.SIGINT, signal.SIG_DFL if interrupt is None else interrupt)
        _fallback(command)
        return 1  # not reached
    child.append(REPLY.unpack(pid_bytes)[0])
    for early in pending:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child[0], early)
    status = _receive(conn, REPLY.size)
    if status is not None:
        (code,) = REPLY.unpack(status)
        return _stand_in() if code == LET_GO else int(code)
    while True:  # the server is gone, its child may not be
        try:
            os.kill(child[0], 0)
        except ProcessLookupError:
            return 1
        time.sleep(0.2)


def _stand_in() -> int:
    """Stay while Spark holds this process as its daemon (see `LET_GO`), then exit 0.

    Spark notices that a daemon is gone when it next connects to its port (refused), stops this process
    (`Process.destroy()`: SIGTERM) and starts a new daemon. Until then it may write to this process's standard input
    (which worker to stop), so that pipe stays open here: a process that had exited would make those writes fail.
    """
    parent = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(0))
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
