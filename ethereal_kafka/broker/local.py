"""A real single-node Apache Kafka broker (KRaft, broker+controller) run from Maven Central jars, without Docker.

`LocalBroker` is what `ethereal-kafka broker start|stop|status` and the test kit use. The broker runs as a background
JVM in its own session, bound to 127.0.0.1, with its configuration, data, log and pid under a state directory, so a
later process (another CLI call, a test teardown) can find and stop it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ethereal_kafka.broker.jars import ensure_jars, kafka_version
from ethereal_kafka.broker.ownership import port_holder, refuse_foreign, start_lock
from ethereal_kafka.broker.ports import free_port
from ethereal_kafka.broker.procs import JVM_MARKER
from ethereal_kafka.errors import BrokerError
from ethereal_kafka.paths import cache_home

__all__ = [
    "JVM_MARKER",
    "BrokerSettings",
    "BrokerStatus",
    "LocalBroker",
    "format_storage",
    "new_cluster_id",
]

#: Broker settings a single node needs for transactions (see KAFKA-BROKER-NOTES.md).
SINGLE_NODE_SETTINGS: Mapping[str, str] = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.dedupe.buffer.size": "16777216",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
}

_JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")


@dataclass(frozen=True)
class BrokerSettings:
    """How to run one local broker.

    Attributes:
        name: Names the state directory (`<cache>/brokers/<name>`) unless `state_dir` is given.
        state_dir: Where configuration, data, log and pid live.
        port: PLAINTEXT port; 0 picks a free one on first start and keeps it across restarts.
        controller_port: KRaft controller port; 0 as above.
        heap: JVM heap (`-Xmx`).
        start_timeout_s: How long `start` waits for a metadata request to answer.
        overrides: Extra `server.properties` entries (e.g. `transaction.max.timeout.ms`); they win over the
            single-node defaults (a node of a `LocalCluster` overrides `node.id`, the voters and the replication).
        cluster_id: The KRaft cluster id its storage is formatted with (None: a random one; the nodes of one
            cluster share theirs).
    """

    name: str = "default"
    state_dir: Path | None = None
    port: int = 0
    controller_port: int = 0
    heap: str = "512m"
    start_timeout_s: float = 90.0
    overrides: Mapping[str, str] = field(default_factory=dict)
    cluster_id: str | None = None

    def resolved_state_dir(self) -> Path:
        """Return the state directory these settings name."""
        return self.state_dir if self.state_dir is not None else cache_home() / "brokers" / self.name


@dataclass(frozen=True)
class BrokerStatus:
    """What `LocalBroker.status` found."""

    running: bool
    bootstrap: str | None
    pid: int | None
    state_dir: Path
    log_file: Path
    kafka_version: str

    def describe(self) -> str:
        """One human line: running or not, and where."""
        if self.running:
            return (
                f"running: Apache Kafka {self.kafka_version} at {self.bootstrap} "
                f"(pid {self.pid}, state {self.state_dir})"
            )
        return f"not running (state {self.state_dir})"


# Popen handles of brokers this process started, so `stop` can reap them instead of leaving zombies.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class LocalBroker:
    """Start, inspect and stop one local broker.

    Methods are safe to call from different processes: all state is read from the state directory.
    """

    def __init__(self, settings: BrokerSettings | None = None) -> None:
        self.settings = settings or BrokerSettings()
        self.state_dir = self.settings.resolved_state_dir()

    # -- paths ---------------------------------------------------------------------------------------------------
    @property
    def log_file(self) -> Path:
        """The broker's log4j log."""
        return self.state_dir / "broker.log"

    @property
    def _state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def _data_dir(self) -> Path:
        return self.state_dir / "data"

    # -- queries -------------------------------------------------------------------------------------------------
    def _read_state(self) -> dict[str, object]:
        try:
            loaded = json.loads(self._state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def _live_pid(self) -> int | None:
        pid = self._read_state().get("pid")
        if not isinstance(pid, int) or not _is_our_jvm(pid, self.state_dir):
            return None
        return pid

    def status(self) -> BrokerStatus:
        """Report whether this broker's JVM runs, and its bootstrap address."""
        state = self._read_state()
        pid = self._live_pid()
        bootstrap = state.get("bootstrap")
        return BrokerStatus(
            running=pid is not None,
            bootstrap=str(bootstrap) if pid is not None and bootstrap else None,
            pid=pid,
            state_dir=self.state_dir,
            log_file=self.log_file,
            kafka_version=str(state.get("kafka_version", kafka_version())),
        )

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> BrokerStatus:
        """Start the broker in the background and wait until a metadata request answers.

        Idempotent: a running broker this user started is returned as it is (a concurrent start of the same state
        directory waits for the first and returns its broker). A stopped broker restarts on its former ports with
        its former data, so clients holding its bootstrap address reconnect. A broker this user did not start is
        never replaced (`broker.ownership`).

        Raises:
            BrokerError: the state directory or a broker running from it belongs to someone else, Java or Maven
                missing, jar download failed, a port is busy (the message says who holds it), or the broker did not
                become ready within `start_timeout_s` (the message names the log file).
        """
        self.refuse_foreign()
        current = self.status()
        if current.running:
            return current
        with start_lock(self.state_dir):
            self.refuse_foreign()
            current = self.status()
            if current.running:
                return current
            self.await_ready(self.spawn())
            return self.status()

    def refuse_foreign(self) -> None:
        """Raise BrokerError unless this broker's state directory and JVM are this user's (`ownership`)."""
        refuse_foreign(self.state_dir, _int(self._read_state().get("pid")) or None)

    def spawn(self) -> subprocess.Popen[bytes]:
        """Launch the broker JVM without waiting for it (the caller holds `start_lock` and saw it stopped, then
        calls `await_ready`): what `start` does in two halves, so that a `LocalCluster` can launch every node
        before waiting for any (a node of a new cluster answers only once a quorum of controllers runs).

        Raises:
            BrokerError: as `start`, except readiness.
        """
        java = _find_java()
        libs = ensure_jars()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        state = self._read_state()
        port = self.settings.port or _int(state.get("port")) or free_port()
        controller_port = (
            self.settings.controller_port or _int(state.get("controller_port")) or free_port(port)
        )
        for p in (port, controller_port):
            if not _port_free(p):
                holder = port_holder(p)
                raise BrokerError(
                    f"port 127.0.0.1:{p} is busy{f' (held by {holder})' if holder else ''}: "
                    "stop what uses it or choose another port"
                )
        props = self._write_config(port, controller_port)
        if not (self._data_dir / "meta.properties").exists():
            format_storage(java, libs, props, self._data_dir, self.settings.cluster_id or new_cluster_id())
        log4j = self.state_dir / "log4j2.properties"
        log4j.write_text(
            resources.files("ethereal_kafka.broker")
            .joinpath("resources/log4j2.properties")
            .read_text("utf-8"),
            encoding="utf-8",
        )
        cmd = [
            java,
            "-Xms256m",
            f"-Xmx{self.settings.heap}",
            *_JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dethereal.kafka.log.file={self.log_file}",
            f"{JVM_MARKER}{self.state_dir}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(props),
        ]
        stdout = (self.state_dir / "stdout.log").open("ab")
        try:
            proc = subprocess.Popen(
                cmd, stdout=stdout, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        finally:
            stdout.close()
        _CHILDREN[proc.pid] = proc
        bootstrap = f"127.0.0.1:{port}"
        self._state_file.write_text(
            json.dumps(
                {
                    "pid": proc.pid,
                    "bootstrap": bootstrap,
                    "port": port,
                    "controller_port": controller_port,
                    "kafka_version": kafka_version(),
                    "started_at": time.time(),
                }
            ),
            encoding="utf-8",
        )
        return proc

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL after `timeout_s`) and wait until its JVM is gone.

        Returns:
            True if a running broker was stopped, False if none ran.

        Raises:
            BrokerError: the broker belongs to another user (`ownership.refuse_foreign`), or did not exit.
        """
        pid = self.terminate()
        if pid is None:
            return False
        self.await_exit(pid, timeout_s)
        return True

    def terminate(self) -> int | None:
        """Send the running broker SIGTERM without waiting (`stop`'s first half; a `LocalCluster` stops its nodes
        together); returns its pid, None when none ran.

        Raises:
            BrokerError: the broker belongs to another user (`ownership.refuse_foreign`).
        """
        pid = self._live_pid()
        if pid is None:
            return None
        refuse_foreign(self.state_dir, pid)
        _signal(pid, signal.SIGTERM)
        return pid

    def await_exit(self, pid: int, timeout_s: float) -> None:
        """Wait for the broker JVM `pid` to exit; SIGKILL it after `timeout_s` (`stop`'s second half).

        Raises:
            BrokerError: it did not exit after SIGKILL either.
        """
        if not _wait_gone(pid, self.state_dir, timeout_s):
            _signal(pid, signal.SIGKILL)
            if not _wait_gone(pid, self.state_dir, 10.0):
                raise BrokerError(f"broker pid {pid} did not exit after SIGKILL")

    def kill(self) -> bool:
        """SIGKILL the broker JVM (a crash, for failure tests); data stays, so `start` restarts it."""
        pid = self._live_pid()
        if pid is None:
            return False
        _signal(pid, signal.SIGKILL)
        if not _wait_gone(pid, self.state_dir, 10.0):
            raise BrokerError(f"broker pid {pid} did not exit after SIGKILL")
        return True

    def destroy(self) -> None:
        """Stop the broker and delete its state directory (data, log, configuration)."""
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    # -- internals -----------------------------------------------------------------------------------------------
    def _write_config(self, port: int, controller_port: int) -> Path:
        entries = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self._data_dir),
            **SINGLE_NODE_SETTINGS,
            **self.settings.overrides,
        }
        path = self.state_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in entries.items()), encoding="utf-8")
        return path

    def await_ready(self, proc: subprocess.Popen[bytes]) -> None:
        """Wait until the JVM `spawn` launched answers a metadata request.

        Raises:
            BrokerError: it exited during start-up, or did not answer within `start_timeout_s` (then it is
                stopped).
        """
        bootstrap = str(self._read_state().get("bootstrap"))
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                _CHILDREN.pop(proc.pid, None)
                raise BrokerError(
                    f"broker exited with code {proc.returncode} during start-up: {self._last_log_line()} "
                    f"(log: {self.log_file})"
                )
            if _metadata_answers(bootstrap):
                return
            time.sleep(0.25)
        self.stop(timeout_s=5.0)
        raise BrokerError(
            f"broker did not answer a metadata request within {self.settings.start_timeout_s:.0f}s "
            f"(log: {self.log_file})"
        )

    def _last_log_line(self) -> str:
        for path in (self.log_file, self.state_dir / "stdout.log"):
            try:
                lines = [
                    ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()
                ]
            except OSError:
                continue
            errors = [ln for ln in lines if "ERROR" in ln or "Exception" in ln]
            if errors or lines:
                return (errors or lines)[-1].strip()[:300]
        return "no log output"


def format_storage(java: str, libs: Path, props: Path, data_dir: Path, cluster_id: str) -> None:
    """Format the KRaft storage of `props` (after removing `data_dir`) with `cluster_id`.

    The id is passed as `--cluster-id=<id>`: a random id may start with `-`, which the tool's argument parser
    would take for an option after a separate `-t`.

    Raises:
        BrokerError: the storage tool failed (its last line is in the message).
    """
    shutil.rmtree(data_dir, ignore_errors=True)
    cmd = [java, *_JVM_OPTIONS, "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format"]
    cmd += [f"--cluster-id={cluster_id}", "-c", str(props)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        # A Java stack trace ends in `at ...` lines: name the exception instead.
        cause = [
            ln for ln in lines if ("Exception" in ln or "Error" in ln) and not ln.lstrip().startswith("at ")
        ]
        last = cause[:1] or lines[-1:] or [f"exit {proc.returncode}"]
        raise BrokerError(f"formatting KRaft storage in {data_dir} failed: {last[0].strip()}")


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def new_cluster_id() -> str:
    """A new KRaft cluster id: a base64url-encoded UUID without padding (22 characters)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    candidate = str(Path(home) / "bin" / "java") if home else None
    java = candidate if candidate and Path(candidate).exists() else shutil.which("java")
    if java is None:
        raise BrokerError("Java not found (no JAVA_HOME, no java on PATH): install a JDK 17 or newer")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)', out)
    if match and int(match.group(1)) < 17:
        raise BrokerError(f"Java {match.group(1)} found at {java}: Apache Kafka 4 needs Java 17 or newer")
    return java


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _metadata_answers(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            pass
    except OSError:
        return False
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=2.0)
    except Exception:  # KafkaException while the broker finishes starting
        return False
    return bool(metadata.brokers)


def _is_our_jvm(pid: int, state_dir: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # exited, waiting to be reaped
            _reap(pid)
            return False
    except OSError:
        return False
    return f"{JVM_MARKER}{state_dir}" in cmdline.split("\0")


def _reap(pid: int) -> None:
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        child.wait()


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(pid: int, state_dir: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        child = _CHILDREN.get(pid)
        if child is not None and child.poll() is not None:
            _CHILDREN.pop(pid, None)
        if not _is_our_jvm(pid, state_dir):
            return True
        time.sleep(0.1)
    return False
