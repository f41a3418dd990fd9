"""The source runners' fork server (`runtime.fork_server`) and its launcher, on a module of the test's own:
what `python -m MODULE` would see (arguments, directory, environment, streams, exit status, signals) and the
way back to a plain start when the server is gone. A real session's runners: `test_a_local_session_runs_its_python_
sources_from_the_fork_server` (the `spark` fixture)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from ethereal_kafka.runtime import fork_server

PROBE = """\
import os, sys, time
print("child", os.getpid(), os.getppid(), sys.argv[1:], os.environ.get("PROBE_VALUE"), os.getcwd())
print("to stderr", file=sys.stderr, flush=True)
if os.environ.get("PROBE_WAIT"):
    time.sleep(60)
sys.exit(int(os.environ.get("PROBE_CODE", "0")))
"""


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[fork_server.ForkServer]:
    (tmp_path / "fork_probe.py").write_text(PROBE)
    # The server finds the probe as a child finds any module: on the PYTHONPATH the launcher was given.
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    # A server with buffered output of its own: a child's is unbuffered only when its launcher is asked to.
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    server = fork_server.start(modules=("fork_probe",), preloaded=("json",))
    try:
        yield server
    finally:
        server.close()
    assert not server.folder.exists(), "close deletes the launcher and the socket"


def _child_fields(line: bytes) -> tuple[int, int]:
    fields = line.split()
    return int(fields[1]), int(fields[2])


def test_a_routed_module_runs_as_python_dash_m_would_run_it(
    server: fork_server.ForkServer, tmp_path: Path
) -> None:
    env = {**os.environ, "PROBE_VALUE": "v1", "PROBE_CODE": "3"}
    done = subprocess.run(
        [str(server.launcher), "-m", "fork_probe", "a", "b c"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 3
    assert done.stderr == b"to stderr\n"
    _, parent = _child_fields(done.stdout)
    assert parent == server.process.pid, "forked by the server"
    assert Path(f"/proc/{server.process.pid}/comm").read_text().strip() == fork_server.SERVER_NAME
    assert done.stdout.split(maxsplit=3)[3] == f"['a', 'b c'] v1 {tmp_path}\n".encode()


def test_other_commands_run_with_the_interpreter_unchanged(server: fork_server.ForkServer) -> None:
    done = subprocess.run(
        [str(server.launcher), "-c", "import os, sys; print(sys.executable, os.getppid())"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    executable, parent = done.stdout.split()
    assert executable == sys.executable and int(parent) == os.getpid()


def _start_waiting(server: fork_server.ForkServer) -> tuple[subprocess.Popen[bytes], int]:
    launcher = subprocess.Popen(
        [str(server.launcher), "-m", "fork_probe"],
        # Spark's `-u`: the line must reach the pipe while the child still runs.
        env={**os.environ, "PROBE_WAIT": "1", "PYTHONUNBUFFERED": "YES"},
        stdout=subprocess.PIPE,
    )
    assert launcher.stdout is not None
    child, _ = _child_fields(launcher.stdout.readline())
    return launcher, child


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_sigterm_to_the_launcher_ends_the_child_with_the_status_a_shell_reports(
    server: fork_server.ForkServer,
) -> None:
    """Spark stops a runner with `Process.destroy()`: SIGTERM to the process it started."""
    launcher, child = _start_waiting(server)
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=10) == 128 + signal.SIGTERM
    assert _gone(child)


def test_a_killed_launcher_takes_its_child_with_it(server: fork_server.ForkServer) -> None:
    launcher, child = _start_waiting(server)
    launcher.kill()
    launcher.wait(timeout=10)
    assert _gone(child), "the child outlived the process Spark knows"


def test_the_driver_gone_ends_the_server_and_its_children(server: fork_server.ForkServer) -> None:
    launcher, child = _start_waiting(server)
    assert server.process.stdin is not None
    server.process.stdin.close()  # what the driver's exit does
    assert server.process.wait(timeout=10) == 0
    assert _gone(child)
    assert launcher.wait(timeout=10) == 128 + signal.SIGTERM, "the child's status reached its launcher"


def test_without_the_server_the_launcher_starts_the_module_itself(
    server: fork_server.ForkServer, tmp_path: Path
) -> None:
    server.process.kill()
    server.process.wait()
    done = subprocess.run(
        [str(server.launcher), "-m", "fork_probe", "x"],
        env={**os.environ, "PROBE_VALUE": "v2", "PROBE_CODE": "4"},
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 4
    _child_fields(done.stdout)
    assert done.stdout.split(maxsplit=3)[3] == f"['x'] v2 {tmp_path}\n".encode()


def test_every_module_a_runner_imports_is_preloadable() -> None:
    assert fork_server.preload() == []


def test_the_switch_turns_the_server_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fork_server.ENV_SWITCH, "0")
    assert fork_server.session_launcher() is None


class _WhereSource(DataSource):
    """A streaming source whose reader writes down the source runner's parent and process name."""

    @classmethod
    def name(cls) -> str:
        return "fork_where"

    def schema(self) -> str:
        return "v int"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _WhereReader(self.options["path"])


class _WhereReader(DataSourceStreamReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def initialOffset(self) -> dict[str, int]:
        return {"o": 0}

    def latestOffset(self) -> dict[str, int]:
        # Called in the source runner only (the planners build a reader too, to plan the reads).
        name = Path("/proc/self/comm").read_text().strip()
        Path(self.path).write_text(f"{os.getppid()} {name}")
        return {"o": 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        # In a Python worker: its parent is the worker daemon.
        Path(f"{self.path}.worker").write_text(str(os.getppid()))
        yield (1,)


def test_a_local_session_runs_its_python_sources_from_the_fork_server(
    spark: SparkSession, tmp_path: Path
) -> None:
    launcher = fork_server.running_launcher()
    assert launcher is not None and spark.sparkContext.pythonExec == launcher
    assert fork_server._running is not None
    spark.dataSource.register(_WhereSource)
    where = tmp_path / "where"
    query = (
        spark.readStream.format("fork_where")
        .option("path", str(where))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    parent, name = where.read_text().split()
    assert int(parent) == fork_server._running.process.pid, "the source runner was not forked by the server"
    assert name == "source-runner", "named for what it runs"
    daemon = int(Path(f"{where}.worker").read_text())
    daemon_parent = int(Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert daemon_parent == fork_server._running.process.pid, "the worker daemon was not forked by the server"


def test_the_worker_daemons_modules_leave_pandas_out_for_workers_that_never_use_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ethereal_kafka.runtime import worker_daemon

    monkeypatch.delenv(worker_daemon.PANDAS_ENV, raising=False)
    assert "pandas" in fork_server._worker_modules()
    monkeypatch.setenv(worker_daemon.PANDAS_ENV, "0")
    modules = fork_server._worker_modules()
    assert not worker_daemon.PANDAS_MODULES & set(modules) and "pyspark.worker" in modules


def test_a_temporary_folder_that_cannot_run_the_launcher_leaves_spark_its_own_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a `/tmp` mounted noexec, Spark could start no Python process through the launcher: no server then."""
    real = os.statvfs

    class NoExec:
        def __init__(self, path: Any) -> None:
            self.f_flag = real(path).f_flag | os.ST_NOEXEC

    monkeypatch.setattr(fork_server.os, "statvfs", NoExec)
    monkeypatch.setattr(fork_server, "_running", None)
    assert fork_server.session_launcher() is None


def _planner_daemons(server_pid: int) -> list[int]:
    """The server's children that run a data source planner daemon (named by `fork_server.PROCESS_NAMES`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        state, parent = rest.split()[:2]
        if int(parent) == server_pid and name == "planner-daemon" and state != "Z":
            found.append(int(entry.name))
    return found


def test_the_planner_daemons_let_go_after_a_start_come_back_when_a_query_plans_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """`release_planners` ends the daemons Spark keeps for planning Python sources; Spark starts them again
    (through the server) when the next query plans, and that query runs."""
    assert fork_server._running is not None
    server = fork_server._running.process.pid
    spark.dataSource.register(_WhereSource)

    def run_one(n: int) -> None:
        where = tmp_path / f"where{n}"
        query = (
            spark.readStream.format("fork_where")
            .option("path", str(where))
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / f"checkpoint{n}"))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert Path(f"{where}.worker").exists(), f"query {n} ran no epoch"

    run_one(1)
    assert _planner_daemons(server), "planning the query left no planner daemon to let go"
    assert fork_server.release_planners()
    deadline = time.monotonic() + 10
    while _planner_daemons(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _planner_daemons(server), "the planner daemons outlived their release"
    run_one(2)
    assert _planner_daemons(server), "the second query planned without the server's daemons"
