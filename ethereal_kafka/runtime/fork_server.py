"""A fork server for the Python processes Spark starts on the driver of an embedded session: each starts with
PySpark and the framework already imported.

Spark runs the driver side of a Python streaming source (offsets, partitions, commits) in a Python process of its
own per source and query, `python -m pyspark.sql.streaming.python_streaming_source_runner`, started as a "simple
worker": never forked from the worker daemon, so each one imported PySpark, pyarrow and the framework's source
again: 0.37 CPU-s and ~74 MB for PySpark's part alone (measured on the 2-core test machine), eleven times per start
of a seven-query job, one after the other (a query starts once its source has initialized). The same for the data
source planners' daemons, transformWithState's driver workers (one per stateful operator) and the worker daemon:
each a fresh Python importing much of the same.

How: a local session's Python executable (`SparkContext.pythonExec`, which every Python function and data source
registered afterwards carries) is a launcher script (`ForkServer.launcher`). A module of `ROUTED` goes through
`runtime.fork_client`, which hands the process's standard streams (the pipes Spark reads), working directory,
arguments and environment to this server over a Unix socket; the server forks a child that already imported what
those processes import (`PRELOAD`), which runs the module as `__main__` with them, as `python -m` would. The client
stands in for the child (signals passed on, its exit status returned); a client that goes away takes its child with
it. Anything else is exec'd with this interpreter, unchanged. Spark's protocols with these processes are untouched:
a runner connects back and reports its own pid, a daemon talks over the streams it was given, as always.

The server is a child of the driver in its session (a kill of the run's session reaches it and every process it forked), and
exits when the driver does (its stdin, a pipe from the driver, closes). Clusters keep Spark's way: an executor host
would not have the launcher. `ETHEREAL_KAFKA_FORK_SERVER=0` turns it off. The worker daemon's fork-time choices
(pandas hidden from a `transform.sql` job's workers, the heap frozen) stay the daemon's own.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import importlib
import io
import json
import logging
import os
import pkgutil
import runpy
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, NoReturn

from ethereal_kafka.runtime.fork_client import LENGTH, LET_GO, REPLY

log = logging.getLogger(__name__)

#: The module Spark runs for a Python streaming source (one process per source and query).
RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
#: The daemon Spark runs per data source planner module (`pyspark.daemon pyspark.sql.worker.create_data_source`,
#: `... plan_data_source_read`); it forks a planner per call, which imports its module after the fork.
PLANNER_DAEMON = "pyspark.daemon"
#: The module Spark runs on the driver for each transformWithState operator of a query, at its start.
STATEFUL_DRIVER_MODULE = "pyspark.sql.streaming.transform_with_state_driver_worker"
#: The framework's Python worker daemon (`spark.python.daemon.module`), one per session: it forks the workers.
WORKER_DAEMON = "ethereal_kafka.runtime.worker_daemon"
#: The modules whose `python -m` runs are forked from the server.
ROUTED: tuple[str, ...] = (RUNNER_MODULE, PLANNER_DAEMON, STATEFUL_DRIVER_MODULE, WORKER_DAEMON)
#: A forked child keeps the server's command line; its process name (`/proc/PID/comm`, what `ps -o comm` and
#: `psutil.Process.name()` show) says what it runs. A planner daemon's forked planners keep its name.
PROCESS_NAMES: dict[str, str] = {
    RUNNER_MODULE: "source-runner",
    PLANNER_DAEMON: "planner-daemon",
    STATEFUL_DRIVER_MODULE: "stateful-driver",
    WORKER_DAEMON: "worker-daemon",
}
#: The server's own process name.
SERVER_NAME = "fork-server"
#: Set to `0` to have Spark start its Python processes itself (to compare, or to rule the server out).
ENV_SWITCH = "ETHEREAL_KAFKA_FORK_SERVER"
#: What the processes the server forks import, loaded by the server once before it forks (a module that cannot be
#: imported is skipped; the child imports it, or fails on it, as without the server).
PRELOAD: tuple[str, ...] = (
    WORKER_DAEMON,
    RUNNER_MODULE,
    PLANNER_DAEMON,
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    STATEFUL_DRIVER_MODULE,
    # What the stateful driver imports when it unpickles the framework's processors and talks to the JVM.
    "pyspark.sql.streaming.stateful_processor_api_client",
    "pyspark.sql.streaming.proto.StateMessage_pb2",
    "ethereal_kafka.api",
    "ethereal_kafka.plan.operators.*",
    "ethereal_kafka.eos.source",
    "ethereal_kafka.connectors.event_time",
    # The runner's connection back to the JVM resolves a host name (measured: the only modules a child imported).
    "encodings.idna",
)
#: Longest time a connected client may take to send its request.
REQUEST_TIMEOUT_S = 10.0
#: What the driver writes on the server's standard input to end the planner daemons (`ForkServer.release_planners`).
RELEASE_PLANNERS = b"p"


def launcher_script(python: str, client: str, socket_path: str, modules: tuple[str, ...]) -> str:
    """The launcher's text: `python -m M` for a module M of `modules` through the server's client, anything else
    straight to `python`."""
    py, cl, sock = (shlex.quote(v) for v in (python, client, socket_path))
    return (
        "#!/bin/sh\n"
        "# Written by ethereal_kafka.runtime.fork_server: Spark's Python executable for this session.\n"
        'if [ "$1" = "-m" ]; then\n'
        '  case "$2" in\n'
        f'    {"|".join(shlex.quote(m) for m in modules)}) exec {py} -I -S {cl} {sock} "$@" ;;\n'
        "  esac\n"
        "fi\n"
        f'exec {py} "$@"\n'
    )


@dataclass
class ForkServer:
    """A running fork server (a child process of this one) and the launcher script that routes Spark's Python processes to it."""

    process: subprocess.Popen[bytes]
    folder: Path
    launcher: Path = field(init=False)

    def __post_init__(self) -> None:
        self.launcher = self.folder / "python"

    @property
    def socket_path(self) -> Path:
        return self.folder / "fork-server.sock"

    def release_planners(self) -> bool:
        """Have the server end the data source planners' daemons (and their planners) it forked; returns whether
        the word reached it.

        Spark plans a streaming query's Python source once per query start (`create_data_source` when the query's
        DataFrame is made, `plan_data_source_read` at its first epoch), yet keeps a daemon per planner module
        resident for the session's life, and its last planner for a minute: ~80 MB each, a fifth of a stateless
        job's memory. Call once every query has begun an epoch (`runtime.planners`). The launcher Spark holds for each daemon stays
        (`fork_client.LET_GO`); when a later start plans again, Spark finds the daemon's port closed, stops that
        launcher and starts a daemon again (two warnings in Spark's log), forked from this server as before.
        """
        if self.process.stdin is None or self.process.poll() is not None:
            return False
        try:
            self.process.stdin.write(RELEASE_PLANNERS)
            self.process.stdin.flush()
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Stop the server (its children are ended with it) and delete its folder. Idempotent; never raises."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)  # the server gives its children 3 s after SIGTERM
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start(
    python: str = sys.executable,
    modules: tuple[str, ...] = ROUTED,
    preloaded: tuple[str, ...] = PRELOAD,
) -> ForkServer:
    """Start a fork server for `python -m M` of each module M of `modules`, with `preloaded` imported, and write its
    launcher; returns at once (the server binds its socket first, then imports: a process that connects meanwhile
    waits for the imports it would have done itself).

    Raises:
        OSError: the folder or the process could not be created, or the temporary folder's file system does not
            allow running the launcher (mounted `noexec`).
    """
    folder = Path(tempfile.mkdtemp(prefix="ek-fork-server-"))
    if os.statvfs(folder).f_flag & os.ST_NOEXEC:  # Spark could not run the launcher from there
        shutil.rmtree(folder, ignore_errors=True)
        raise OSError(f"{folder.parent} is mounted noexec")
    fork_client = Path(__file__).with_name("fork_client.py")
    socket_path = folder / "fork-server.sock"
    process = subprocess.Popen(
        [python, "-m", __name__, str(socket_path), *preloaded],
        stdin=subprocess.PIPE,
        # The children's own output goes to the streams Spark gave them; the server's to this process's.
        close_fds=True,
    )
    launcher = folder / "python"
    launcher.write_text(launcher_script(python, str(fork_client), str(socket_path), modules))
    launcher.chmod(0o755)
    return ForkServer(process, folder)


_running: ForkServer | None = None


def running_launcher() -> str | None:
    """The launcher of this process's server while it runs, else None."""
    if _running is None or _running.process.poll() is not None:
        return None
    return str(_running.launcher)


def release_planners() -> bool:
    """`ForkServer.release_planners` on this process's running server; False when none runs."""
    if _running is None:
        return False
    return _running.release_planners()


def session_launcher() -> str | None:
    """This process's launcher (its server started at the first call), or None when `ETHEREAL_KAFKA_FORK_SERVER=0`
    or the server cannot start (logged: Spark then starts its Python processes itself)."""
    global _running
    if os.environ.get(ENV_SWITCH) == "0":
        return None
    if _running is None or _running.process.poll() is not None:
        try:
            _running = start()
        except OSError as exc:
            log.warning("Spark starts its Python processes without the fork server: %s", exc)
            return None
        atexit.register(_running.close)
    return str(_running.launcher)


# ---- the server process ----


def _worker_modules() -> tuple[str, ...]:
    """What the worker daemon preloads for its workers, without pandas when they never use it (the daemon forked
    from here then hides it from itself and its workers, as when Spark starts it; the server's other children keep
    it importable)."""
    from ethereal_kafka.runtime import worker_daemon

    names = worker_daemon.PRELOAD["pyspark.worker"]
    if os.environ.get(worker_daemon.PANDAS_ENV) == "0":
        names = tuple(n for n in names if n not in worker_daemon.PANDAS_MODULES)
    return names


def preload(names: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import `names` (`package.*`: the package and each of its modules; `WORKER_DAEMON`: what the daemon's workers
    share, `_worker_modules`); returns those that could not be imported."""
    missing = []
    for name in names:
        try:
            if name == WORKER_DAEMON:
                missing += preload(_worker_modules())
            elif name.endswith(".*"):
                package = importlib.import_module(name[:-2])
                for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
                    importlib.import_module(module.name)
            else:
                importlib.import_module(name)
        except Exception:
            missing.append(name)
    return missing


@dataclass
class _Request:
    argv: list[str]
    cwd: str
    env: dict[str, str]


def _read_request(conn: socket.socket) -> tuple[_Request, list[int]] | None:
    """A client's request and the three descriptors it sent, or None (closed, malformed or too slow; any descriptor
    received is closed)."""
    conn.settimeout(REQUEST_TIMEOUT_S)
    fds: list[int] = []
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        if len(data) < LENGTH.size or len(fds) != 3:
            raise ValueError("short request")
        (size,) = LENGTH.unpack_from(data)
        body = data[LENGTH.size :]
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                raise ValueError("request cut short")
            body += chunk
        raw = json.loads(body.decode("utf-8", "surrogateescape"))
        request = _Request(
            [str(a) for a in raw["argv"]], str(raw["cwd"]), {str(k): str(v) for k, v in raw["env"].items()}
        )
        if len(request.argv) < 2 or request.argv[0] != "-m":
            raise ValueError(f"not a module run: {request.argv[:2]}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("fork server: a request was dropped: %s", exc)
        for fd in fds:
            os.close(fd)
        return None
    conn.settimeout(None)
    return request, fds


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _run_child(request: _Request, fds: list[int], inherited: list[int]) -> NoReturn:
    """In the forked child: become `python -m MODULE ARGS` with the client's streams, directory and environment."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        if request.env.get(
            "PYTHONUNBUFFERED"
        ):  # Spark asks for it (`-u`): each write reaches its pipe at once
            sys.stdout = io.TextIOWrapper(
                io.FileIO(1, "w", closefd=False), encoding=sys.stdout.encoding, write_through=True
            )
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)
        extra = [p for p in request.env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[:1] = [request.cwd, *extra]
        module, args = request.argv[1], request.argv[2:]
        sys.argv = [module, *args]
        _name_process(PROCESS_NAMES.get(module, module.rsplit(".", 1)[-1]))
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code & 0xFF)


@dataclass
class _Child:
    """A forked child: its client's connection, the module it runs, and whether the driver's word ended it."""

    conn: socket.socket
    module: str
    let_go: bool = False


def serve(listener: socket.socket, parent: IO[bytes]) -> None:
    """Fork a child per request until `parent` (the driver's pipe) closes; then end the children still running."""
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    # Ctrl-C reaches the driver's whole process group: the driver decides, the server stays.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "reap")
    selector.register(parent, selectors.EVENT_READ, "parent")
    children: dict[int, _Child] = {}
    while True:
        for key, _ in selector.select():
            if key.data == "accept":
                conn, _ = listener.accept()
                received = _read_request(conn)
                if received is None:
                    conn.close()
                    continue
                request, fds = received
                inherited = [
                    listener.fileno(),
                    wake_r,
                    wake_w,
                    parent.fileno(),
                    conn.fileno(),
                    _fileno(selector),
                ]
                inherited += [c.conn.fileno() for c in children.values()]
                pid = os.fork()
                if pid == 0:
                    _run_child(request, fds, inherited)
                for fd in fds:
                    os.close(fd)
                children[pid] = _Child(conn, request.argv[1])
                selector.register(conn, selectors.EVENT_READ, pid)
                try:
                    conn.sendall(REPLY.pack(pid))
                except OSError:
                    _end_child(pid, signal.SIGKILL)
            elif key.data == "reap":
                with contextlib.suppress(OSError):
                    while os.read(wake_r, 512):
                        pass
                _reap(children, selector)
            elif key.data == "parent":
                words = os.read(parent.fileno(), 4096)
                if not words:
                    _end_all(children, selector)
                    return
                if RELEASE_PLANNERS in words:
                    for pid, child in children.items():
                        if child.module == PLANNER_DAEMON and not child.let_go:
                            child.let_go = True
                            # pyspark.daemon ends its planners (its own process group) and exits.
                            _end_child(pid, signal.SIGTERM)
            else:  # a client's connection: it only ever closes (its process ended): so does its child
                pid = key.data
                with contextlib.suppress(OSError):
                    if key.fileobj.recv(1):  # type: ignore[union-attr]
                        continue
                _end_child(pid, signal.SIGKILL)
                selector.unregister(key.fileobj)


def _name_process(name: str) -> None:
    """Set this process's name (Linux `prctl(PR_SET_NAME)`, 15 bytes at most); nothing where it is unavailable."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)


def _become_subreaper() -> None:
    """Linux `prctl(PR_SET_CHILD_SUBREAPER)`: orphaned descendants become this process's children."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def _fileno(selector: selectors.BaseSelector) -> int:
    """The selector's own descriptor (epoll's), -1 for one without."""
    fileno = getattr(selector, "fileno", None)
    return int(fileno()) if fileno is not None else -1


def _end_all(children: dict[int, _Child], selector: selectors.BaseSelector, grace_s: float = 3.0) -> None:
    """SIGTERM every child, report those that end within `grace_s`, SIGKILL the rest."""
    for pid in list(children):
        _end_child(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while children and time.monotonic() < deadline:
        _reap(children, selector)
        time.sleep(0.02)
    for pid in list(children):
        _end_child(pid, signal.SIGKILL)
    _reap(children, selector)


def _end_child(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _reap(children: dict[int, _Child], selector: selectors.BaseSelector) -> None:
    """Collect ended children (and orphans of theirs); each child's client gets its exit status, or `LET_GO` for
    one ended on the driver's word."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        child = children.pop(pid, None)
        if child is None:
            continue
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(child.conn)
        with contextlib.suppress(OSError):
            child.conn.sendall(REPLY.pack(LET_GO if child.let_go else _exit_code(status)))
        child.conn.close()


def main(argv: list[str]) -> None:
    """`python -m ethereal_kafka.runtime.fork_server SOCKET MODULE...`: bind, import the modules, serve (stdin is
    the driver's pipe)."""
    path = argv[0]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    _name_process(SERVER_NAME)
    # Orphans of the children come here to be reaped (`_reap`): a planner daemon let go leaves its planners to
    # end after it, and one left unreaped would look alive to the JVM, which would hand its connection out again.
    _become_subreaper()
    missing = preload(tuple(argv[1:]))
    if missing:
        log.debug("fork server: not preloaded: %s", missing)
    gc.freeze()  # the imports stay for the children's whole life: their collections leave those pages shared
    try:
        serve(listener, sys.stdin.buffer)
    finally:
        listener.close()


if __name__ == "__main__":
    main(sys.argv[1:])
