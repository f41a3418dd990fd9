"""A Spark standalone cluster on 127.0.0.1 (one master, N workers) run from the pip pyspark distribution.

For tests that must prove a job does not depend on running inside the driver process:

    with StandaloneSparkCluster(tmp_path / "spark", workers=2) as cluster:
        subprocess.run([*cluster.submit_command(), entry_script, "run", "job.properties"], env=cluster.env())

`SPARK_HOME` is the installed `pyspark` package directory; the daemons are started with `bin/spark-class` (no
`sbin/` scripts, no download). Every daemon binds to 127.0.0.1 (`SPARK_LOCAL_IP`) on free ports, and executors run
Python with this interpreter (`PYSPARK_PYTHON`). Each daemon starts in its own session, so `stop()` can signal the
whole group (SIGTERM, then SIGKILL) including the executor JVMs and Python workers a worker spawned, and then checks
through `/proc` that none of them is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.runtime.spark_home import installed_spark_home

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
#: JVM option naming the cluster's state folder on every daemon's command line (found by `daemon_pids`).
JVM_MARKER = "-Dethereal.kafka.spark.cluster="
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

#: Environment variables of a parent driver that must not leak into the daemons or a submitted driver.
_DRIVER_ONLY_ENV = (
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
    "SPARK_ENV_LOADED",
    "PYSPARK_SUBMIT_ARGS",
)


class SparkClusterError(EtherealKafkaError):
    """The standalone cluster could not start (no Java, a daemon exited, workers did not register in time) or a
    process of it survived `stop()`. The message names the log file to read."""


@dataclass(frozen=True)
class Daemon:
    """One started daemon: its role, process and log file."""

    role: str
    process: subprocess.Popen[bytes]
    log: Path


def spark_home() -> Path:
    """The installed pyspark package directory, which holds `bin/`, `jars/` and the rest of a Spark distribution.
    The cluster runs from it, not from the mirror an embedded session launches from (`runtime.spark_home`)."""
    return installed_spark_home()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandaloneSparkCluster:
    """A master and `workers` workers on 127.0.0.1; not thread-safe; a context manager (start on enter, stop on
    exit).

    Args:
        state_dir: Logs (`master.log`, `worker-<i>.log`) and the workers' work folders (executor logs) go here.
        workers: Worker daemons to start.
        cores: Cores each worker offers.
        memory: Memory each worker offers (`1g`); executors ask for `spark.executor.memory` (default 1g) of it.
        start_timeout_s: How long `start` waits for the master to answer and every worker to register.
        java_options: Extra options for every JVM of the cluster: the master, the workers and the executors of
            the applications submitted with `env()` (through a `spark-defaults.conf` of the cluster's own, in
            `SPARK_CONF_DIR`: `spark.executor.extraJavaOptions`, unless an application sets it). The test kit
            passes its lean profile (`runtime.jvm.TEST_DRIVER_OPTIONS`): each application starts executors anew.
    """

    def __init__(
        self,
        state_dir: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        start_timeout_s: float = 120.0,
        java_options: str = "",
    ) -> None:
        self.state_dir = Path(state_dir)
        self.java_options = java_options
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.web_port = 0
        self.daemons: list[Daemon] = []
        self._sessions: list[int] = []

    @property
    def master_url(self) -> str:
        """`spark://127.0.0.1:PORT` (valid after `start`)."""
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        """The master's web UI (`/json/` lists the workers and applications)."""
        return f"http://127.0.0.1:{self.web_port}"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment the daemons run with, also right for a driver submitted to the cluster: `SPARK_HOME`,
        `SPARK_LOCAL_IP=127.0.0.1`, `PYSPARK_PYTHON`/`PYSPARK_DRIVER_PYTHON` = this interpreter."""
        env = {k: v for k, v in os.environ.items() if k not in _DRIVER_ONLY_ENV}
        env.update(
            {
                "SPARK_HOME": str(spark_home()),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.state_dir),
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
                "PYARROW_IGNORE_TIMEZONE": "1",
            }
        )
        if self.java_options:
            env["SPARK_CONF_DIR"] = str(self.conf_dir)
        env.update(extra or {})
        return env

    @property
    def conf_dir(self) -> Path:
        """The cluster's `SPARK_CONF_DIR` (used when `java_options` is set): its `spark-defaults.conf`."""
        return self.state_dir / "conf"

    def daemon_env(self) -> dict[str, str]:
        """`env()` plus the JVM marker (`SPARK_DAEMON_JAVA_OPTS`) that `daemon_pids` looks for, and `java_options`."""
        opts = os.environ.get("SPARK_DAEMON_JAVA_OPTS", "")
        return self.env(
            {"SPARK_DAEMON_JAVA_OPTS": f"{opts} {self.java_options} {JVM_MARKER}{self.state_dir}".strip()}
        )

    def submit_command(self) -> list[str]:
        """`spark-submit --master <this cluster>`: append the program and its arguments."""
        return [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url]

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> StandaloneSparkCluster:
        """Start the master, then the workers, and wait until every worker is registered and ALIVE.

        Raises:
            SparkClusterError: a daemon exited or the cluster was not ready within `start_timeout_s` (everything
                started is stopped first).
        """
        if self.daemons:
            return self
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.java_options:
            self.conf_dir.mkdir(exist_ok=True)
            (self.conf_dir / "spark-defaults.conf").write_text(
                f"spark.executor.extraJavaOptions {self.java_options}\n", encoding="utf-8"
            )
        self.port, self.web_port = free_port(), free_port()
        deadline = time.monotonic() + self.start_timeout_s
        try:
            self._spawn(
                "master",
                [
                    MASTER_CLASS,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.web_port),
                ],
            )
            self._wait(deadline, lambda state: state is not None, "the master's web UI to answer")
            for i in range(self.workers):
                work = self.state_dir / f"worker-{i}"
                work.mkdir(exist_ok=True)
                self._spawn(
                    f"worker-{i}",
                    [
                        WORKER_CLASS,
                        "--host",
                        "127.0.0.1",
                        "--webui-port",
                        str(free_port()),
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--work-dir",
                        str(work),
                        self.master_url,
                    ],
                )
            self._wait(
                deadline,
                lambda state: state is not None and len(alive_workers(state)) >= self.workers,
                f"{self.workers} worker(s) to register",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict[str, Any] | None:
        """The master's `/json/` document (workers, applications), or None when it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=2.0) as response:
                return dict(json.loads(response.read()))
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop workers, then the master: SIGTERM to each process group, SIGKILL after `timeout_s`.

        Raises:
            SparkClusterError: a process of the cluster (daemon, executor, Python worker) is still alive.
        """
        sessions = [d.process.pid for d in self.daemons]
        self._sessions = sorted({*self._sessions, *sessions})
        for daemon in reversed(self.daemons):
            _signal_group(daemon.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for daemon in reversed(self.daemons):
            try:
                daemon.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(daemon.process.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    daemon.process.wait(timeout=10)
        self.daemons = []
        # Executors and Python workers die with their worker's group; give the kernel a moment to reap them.
        deadline = time.monotonic() + 10
        left = session_pids(sessions)
        while left and time.monotonic() < deadline:
            for pid in sessions:
                _signal_group(pid, signal.SIGKILL)
            time.sleep(0.2)
            left = session_pids(sessions)
        if left:
            raise SparkClusterError(f"Spark cluster processes still running after stop: pids {left}")

    def leftover_pids(self) -> list[int]:
        """Live processes of the sessions this cluster started (empty after a clean `stop`)."""
        return session_pids([*self._sessions, *(d.process.pid for d in self.daemons)])

    def __enter__(self) -> StandaloneSparkCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------------------------------
    def _spawn(self, role: str, args: list[str]) -> None:
        log = self.state_dir / f"{role}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.daemon_env(),
                cwd=self.state_dir,
                start_new_session=True,
            )
        self.daemons.append(Daemon(role, process, log))

    def _wait(self, deadline: float, ready: Any, what: str) -> None:
        while time.monotonic() < deadline:
            for daemon in self.daemons:
                if daemon.process.poll() is not None:
                    raise SparkClusterError(
                        f"Spark {daemon.role} exited with code {daemon.process.returncode} while waiting for {what} "
                        f"(log: {daemon.log})"
                    )
            if ready(self.state()):
                return
            time.sleep(0.25)
        raise SparkClusterError(
            f"timed out after {self.start_timeout_s:.0f}s waiting for {what} (logs under {self.state_dir})"
        )


def daemon_pids(state_dir: Path) -> list[int]:
    """Live master/worker JVMs started for `state_dir` by any `StandaloneSparkCluster` (leak check)."""
    from ethereal_kafka.broker.procs import live_pids

    marker = f"{JVM_MARKER}{Path(state_dir)}"
    return live_pids(lambda args: marker in args)


def alive_workers(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The ALIVE workers in a master's `/json/` document."""
    return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]


def session_pids(sessions: list[int]) -> list[int]:
    """Live (non-zombie) processes whose session id is one of `sessions`."""
    wanted = set(sessions)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp, session, ...
        if fields[0] != "Z" and int(fields[3]) in wanted:
            found.append(int(entry.name))
    return found


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
