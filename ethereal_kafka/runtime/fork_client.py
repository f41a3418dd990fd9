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
#: attached to its first bytes (`SCM_RIGHTS`). Replies: the child's pid, later its exit status (each `!i`).
LENGTH = struct.Struct("!I")
REPLY = struct.Struct("!i")
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
        _fallback(command)
        return 1  # not reached
    (child,) = REPLY.unpack(pid_bytes)

    def _pass_on(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _pass_on)
    status = _receive(conn, REPLY.size)
    if status is not None:
        return int(REPLY.unpack(status)[0])
    while True:  # the server is gone, its child may not be
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return 1
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
