"""A real Confluent-compatible schema registry for tests: Apicurio Registry 3 run from its Maven Central layout.

`LocalSchemaRegistry` resolves `io.apicurio:apicurio-registry-app:<version>:tar.gz:all` once with Maven into the
same cache root as the local broker (`ethereal_kafka.paths.cache_home()`), marks the unpacked layout complete
so later runs are offline, and runs `java -jar quarkus-run.jar` (in-memory storage) on a free 127.0.0.1 port in its
own session. The Confluent-compatible API is served under `/apis/ccompat/v7`; `url` points there, so it can be
given as `schema.registry.url` to `SchemaRegistryClient` and to the serde layer.

The pytest fixture `schema_registry` (session scope) starts one registry per test session and checks at teardown
that its JVM is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

from ethereal_kafka.broker.procs import live_pids
from ethereal_kafka.errors import EtherealKafkaError
from ethereal_kafka.paths import cache_home

#: The pinned Apicurio Registry release (Maven Central publishes `-all.tar.gz` for 3.0.9, 3.3.2, 3.3.3).
#: 3.3.x needs Java 21+; `find_java` looks for one beside the default Java 17.
APICURIO_VERSION = "3.3.3"

#: Marker put on the registry JVM's command line so its process can be recognised (and leaks found).
JVM_MARKER = "-Dethereal.kafka.registry.dir="

#: Path of the Confluent-compatible API below the registry's root URL.
CCOMPAT_PATH = "/apis/ccompat/v7"

_COMPLETE_MARKER = ".complete"
_JVM_OPTIONS = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


class LocalRegistryError(EtherealKafkaError):
    """The local schema registry could not be resolved, started or stopped.

    The message names the cause (missing Java or Maven, failed download, start-up timeout) and, where there is
    one, the log file to read.
    """


def app_dir(version: str = APICURIO_VERSION) -> Path:
    """Return the directory the unpacked Apicurio layout lives in (may not exist yet)."""
    return cache_home() / f"apicurio-registry-{version}" / "app"


def ensure_registry_app(version: str = APICURIO_VERSION, *, quiet: bool = True) -> Path:
    """Return the path of `quarkus-run.jar`, downloading and unpacking the release on first use.

    Called by `LocalSchemaRegistry.start`; cheap (no network I/O) once the cache carries its completion marker.

    Raises:
        LocalRegistryError: Maven is missing, the download failed, or the archive holds no `quarkus-run.jar`.
    """
    target = app_dir(version)
    if (target / _COMPLETE_MARKER).exists():
        return _find_runner(target)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalRegistryError(
            f"Maven (mvn) not found on PATH: it is needed once to fetch Apicurio Registry {version} into "
            f"{target.parent}; install Maven or copy a filled cache there"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / "app.partial"
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        "-q" if quiet else "-ntp",
        f"{_DEPENDENCY_PLUGIN}:unpack",
        f"-Dartifact=io.apicurio:apicurio-registry-app:{version}:tar.gz:all",
        f"-DoutputDirectory={partial}",
    ]
    # Maven needs no project for this goal; run it from an empty directory so no stray pom.xml is picked up.
    with tempfile.TemporaryDirectory() as empty:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=empty)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln]
        first = lines[0] if lines else f"mvn exited with {proc.returncode}"
        raise LocalRegistryError(
            f"failed to download Apicurio Registry {version} from Maven Central: {first}"
        )
    runner = _find_runner(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    (target / _COMPLETE_MARKER).write_text(version, encoding="utf-8")
    return target / runner.relative_to(partial)


def _find_runner(root: Path) -> Path:
    found = sorted(root.rglob("quarkus-run.jar"), key=lambda p: len(p.parts))
    if not found:
        raise LocalRegistryError(f"no quarkus-run.jar under {root}: delete the directory to download again")
    return found[0]


class LocalSchemaRegistry:
    """One Apicurio Registry JVM with in-memory storage, bound to 127.0.0.1.

    Not thread-safe. `start` is idempotent; `stop` leaves no JVM behind (SIGTERM to the process group, SIGKILL
    after a grace period, then verified through `/proc`). Usable as a context manager.

    Attributes:
        state_dir: Where the log (`registry.log`) lives.
        version: The Apicurio release run.
        start_timeout_s: How long `start` waits for the Confluent-compatible API to answer.
    """

    def __init__(
        self, state_dir: Path, *, version: str = APICURIO_VERSION, start_timeout_s: float = 180.0
    ) -> None:
        """Describe a registry; nothing starts until `start()`."""
        self.state_dir = Path(state_dir)
        self.version = version
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._port = 0

    @property
    def log_file(self) -> Path:
        """The file the registry's standard output and error go to."""
        return self.state_dir / "registry.log"

    @property
    def port(self) -> int:
        """The HTTP port (0 before the first start)."""
        return self._port

    @property
    def url(self) -> str:
        """The Confluent-compatible API root, e.g. `http://127.0.0.1:PORT/apis/ccompat/v7`.

        Raises:
            LocalRegistryError: the registry was never started.
        """
        if not self._port:
            raise LocalRegistryError("the local schema registry is not started")
        return f"http://127.0.0.1:{self._port}{CCOMPAT_PATH}"

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs, else None."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    def start(self) -> str:
        """Start the registry (downloading it on first use) and wait until `GET <url>/subjects` answers.

        Returns:
            `url`.

        Raises:
            LocalRegistryError: Java or Maven missing, download failed, the JVM exited, or the API did not answer
                within `start_timeout_s` (the message names the log file; the JVM is stopped first).
        """
        if self.pid is not None:
            return self.url
        java = find_java(_min_java(self.version))
        runner = ensure_registry_app(self.version)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._port = _free_port()
        cmd = [
            java,
            *_JVM_OPTIONS,
            f"{JVM_MARKER}{self.state_dir}",
            f"-Dquarkus.http.port={self._port}",
            "-Dquarkus.http.host=127.0.0.1",
            # The management interface would otherwise bind 0.0.0.0:9000, which parallel registries share.
            f"-Dquarkus.management.port={_free_port()}",
            "-Dquarkus.management.host=127.0.0.1",
            "-jar",
            str(runner),
        ]
        with self.log_file.open("ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state_dir,
                start_new_session=True,
            )
        self._wait_ready()
        return self.url

    def stop(self, timeout_s: float = 20.0) -> bool:
        """Stop the JVM: SIGTERM to its session, SIGKILL after `timeout_s`, then verify it is gone.

        Returns:
            True if a running registry was stopped, False if none ran.

        Raises:
            LocalRegistryError: the JVM survived SIGKILL.
        """
        proc = self._proc
        if proc is None:
            return False
        self._proc = None
        if proc.poll() is not None:
            return False
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired as exc:
                raise LocalRegistryError(f"registry pid {proc.pid} did not exit after SIGKILL") from exc
        if leaked_registry_pids(self.state_dir):
            raise LocalRegistryError(f"registry JVM(s) for {self.state_dir} still running after stop")
        return True

    def __enter__(self) -> LocalSchemaRegistry:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        probe = f"{self.url}/subjects"
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                self._proc = None
                raise LocalRegistryError(
                    f"schema registry exited with code {code} during start-up (log: {self.log_file})"
                )
            if _answers(probe):
                return
            time.sleep(0.25)
        self.stop(timeout_s=5.0)
        raise LocalRegistryError(
            f"schema registry did not answer {probe} within {self.start_timeout_s:.0f}s (log: {self.log_file})"
        )


def find_java(min_major: int) -> str:
    """Return a `java` executable of at least `min_major`.

    Looks at `$JAVA_HOME`, then `java` on PATH, then the JDKs under `/usr/lib/jvm` (newest first), because the
    registry may need a newer Java than the one the broker and Spark run on.

    Raises:
        LocalRegistryError: no Java of that version was found.
    """
    candidates: list[str] = []
    home = os.environ.get("JAVA_HOME")
    if home:
        candidates.append(str(Path(home) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    jvm_root = Path("/usr/lib/jvm")
    if jvm_root.is_dir():
        candidates += [str(p / "bin" / "java") for p in sorted(jvm_root.iterdir(), reverse=True)]
    seen: dict[str, int] = {}
    for java in candidates:
        if java in seen or not Path(java).exists():
            continue
        seen[java] = _java_major(java)
        if seen[java] >= min_major:
            return java
    found = ", ".join(f"{j} ({v})" for j, v in seen.items()) or "none"
    raise LocalRegistryError(
        f"Apicurio Registry needs Java {min_major} or newer; found: {found}. Set JAVA_HOME to a newer JDK"
    )


def _java_major(java: str) -> int:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)', out)
    return int(match.group(1)) if match else 0


def _min_java(version: str) -> int:
    # Apicurio 3.0.x runs on Java 17; later 3.x releases are compiled for Java 21.
    return 17 if version.startswith("3.0.") else 21


def leaked_registry_pids(state_dir: Path) -> list[int]:
    """Return the pids of live (non-zombie) registry JVMs started for `state_dir`."""
    marker = f"{JVM_MARKER}{Path(state_dir)}"
    return live_pids(lambda args: marker in args)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSchemaRegistry]:
    """A running local Apicurio Registry for the whole session; `.url` is its Confluent-compatible API.

    Teardown stops the JVM and fails the session if any registry JVM it started is still running.
    """
    state = tmp_path_factory.mktemp("schema-registry")
    registry = LocalSchemaRegistry(state)
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()
        leaked = leaked_registry_pids(state)
        if leaked:
            raise AssertionError(f"schema registry JVM(s) left running after the session: pids {leaked}")
