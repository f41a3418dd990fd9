"""Per-user state and `broker start` refusing to replace a broker it did not start (CLI; no broker, no Spark).

A "foreign broker" here is a small Python process carrying the broker JVM's command-line marker for a state
directory (what `broker start` recognises a broker by), optionally listening on a port and, when the tests run as
root, running as another user (`nobody`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ethereal_kafka.broker import JVM_MARKER, BrokerSettings, LocalBroker
from ethereal_kafka.runtime.logs import default_log_dir

CLI = [sys.executable, "-m", "ethereal_kafka.cli"]
NOBODY = 65534
#: The fake of another user runs a Python that user can execute (this venv's may sit in root's home).
SYSTEM_PYTHON = "/usr/bin/python3"
as_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="running a process as another user needs root and a system python3",
)

_FAKE = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(120)
"""


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=120, env=env or dict(os.environ), check=False
    )


class Fake:
    """A process that looks like a broker running from `state_dir` and listens on `port`."""

    def __init__(self, state_dir: Path, user: int | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable if user is None else SYSTEM_PYTHON, "-c", _FAKE, f"{JVM_MARKER}{state_dir}"],
            stdout=subprocess.PIPE,
            text=True,
            user=user,
            cwd="/",
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def alive(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def fakes() -> Iterator[list[Fake]]:
    started: list[Fake] = []
    yield started
    for fake in started:
        fake.proc.kill()
        fake.proc.wait()


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_defaults_are_per_user_under_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("ETHEREAL_KAFKA_HOME", "ETHEREAL_KAFKA_LOG_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert (
        BrokerSettings().resolved_state_dir() == tmp_path / "xdg" / "ethereal-kafka" / "brokers" / "default"
    )
    assert default_log_dir("orders") == tmp_path / "xdg" / "ethereal-kafka" / "apps" / "orders" / "logs"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_log_dir("orders") == Path.home() / ".cache" / "ethereal-kafka" / "apps" / "orders" / "logs"
    monkeypatch.setenv("ETHEREAL_KAFKA_HOME", str(tmp_path / "home"))
    assert default_log_dir("orders") == tmp_path / "home" / "apps" / "orders" / "logs"
    monkeypatch.setenv("ETHEREAL_KAFKA_LOG_DIR", str(tmp_path / "logs"))
    assert default_log_dir("orders") == tmp_path / "logs" / "orders"


def test_broker_status_names_the_per_user_default_state_dir(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ETHEREAL_KAFKA_HOME"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    done = cli("broker", "status", env=env)
    assert done.returncode == 3
    assert done.stdout.strip() == f"not running (state {tmp_path}/ethereal-kafka/brokers/default)"


def test_start_refuses_a_broker_its_state_does_not_record(tmp_path: Path, fakes: list[Fake]) -> None:
    state = tmp_path / "shared"
    state.mkdir()
    fake = Fake(state)
    fakes.append(fake)
    line = one_error(cli("broker", "start", "--state-dir", str(state)))
    assert line == (
        f"error: a broker this state does not record runs from {state} (pid {fake.proc.pid}, state.json names "
        f"none): refusing to start a second one over its data; stop it (kill {fake.proc.pid}) or choose another "
        "--state-dir"
    )
    assert fake.alive(), "the other broker was not replaced"
    assert not (state / "server.properties").exists(), "nothing was written over its state"


def test_start_names_the_broker_holding_its_port(tmp_path: Path, fakes: list[Fake]) -> None:
    other = tmp_path / "other"
    fake = Fake(other)
    fakes.append(fake)
    line = one_error(cli("broker", "start", "--state-dir", str(tmp_path / "mine"), "--port", str(fake.port)))
    assert line == (
        f"error: port 127.0.0.1:{fake.port} is busy (held by the ethereal-kafka broker in {other}, pid "
        f"{fake.proc.pid}): stop what uses it or choose another port"
    )
    assert fake.alive()


@as_root
def test_start_and_stop_refuse_another_users_broker(tmp_path: Path, fakes: list[Fake]) -> None:
    state = tmp_path / "theirs"
    state.mkdir()
    fake = Fake(state, user=NOBODY)
    fakes.append(fake)
    # Its state records it, so to `status` it is a running broker: start must neither reuse nor replace it.
    (state / "state.json").write_text(f'{{"pid": {fake.proc.pid}, "bootstrap": "127.0.0.1:{fake.port}"}}')
    expected = (
        f"error: a broker of nobody (uid {NOBODY}) runs from {state} (pid {fake.proc.pid}): refusing to start or "
        "replace a broker you did not start; choose another --state-dir"
    )
    assert one_error(cli("broker", "start", "--state-dir", str(state))) == expected
    assert one_error(cli("broker", "stop", "--state-dir", str(state))) == expected
    assert fake.alive()
    assert LocalBroker(BrokerSettings(state_dir=state)).status().pid == fake.proc.pid


@as_root
def test_start_refuses_another_users_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "theirs"
    state.mkdir()
    os.chown(state, NOBODY, NOBODY)
    line = one_error(cli("broker", "start", "--state-dir", str(state)))
    assert line == (
        f"error: the broker state directory {state} belongs to nobody (uid {NOBODY}): refusing to start or "
        "replace a broker you did not start; use your own (--name, --state-dir, or the default under your cache)"
    )
    assert list(state.iterdir()) == []


@as_root
def test_start_names_another_users_process_on_its_port(tmp_path: Path, fakes: list[Fake]) -> None:
    fake = Fake(tmp_path / "theirs", user=NOBODY)
    fakes.append(fake)
    line = one_error(cli("broker", "start", "--state-dir", str(tmp_path / "mine"), "--port", str(fake.port)))
    assert line == (
        f"error: port 127.0.0.1:{fake.port} is busy (held by another user's process, nobody (uid {NOBODY})): "
        "stop what uses it or choose another port"
    )
