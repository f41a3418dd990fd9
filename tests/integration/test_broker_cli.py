"""`ethereal-kafka broker start|status|stop` from the shell, and its one-line errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from ethereal_kafka.testing.cluster import leaked_broker_pids

CLI = [sys.executable, "-m", "ethereal_kafka.cli"]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180, env=env, check=False)


def test_start_status_stop_leaves_no_jvm(tmp_path: Path) -> None:
    state = tmp_path / "cli-broker"
    started = run_cli("broker", "start", "--state-dir", str(state))
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip().splitlines()[-1]
    assert bootstrap.startswith("127.0.0.1:")
    try:
        again = run_cli("broker", "start", "--state-dir", str(state))
        assert again.stdout.strip().splitlines()[-1] == bootstrap, "start is idempotent"
        status = run_cli("broker", "status", "--state-dir", str(state))
        assert status.returncode == 0 and bootstrap in status.stdout
        host, port = bootstrap.split(":")
        socket.create_connection((host, int(port)), timeout=5).close()
    finally:
        stopped = run_cli("broker", "stop", "--state-dir", str(state))
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped"
    assert leaked_broker_pids(str(state)) == []
    after = run_cli("broker", "status", "--state-dir", str(state))
    assert after.returncode == 3 and "not running" in after.stdout


def test_busy_port_is_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("broker", "start", "--state-dir", str(tmp_path / "b"), "--port", str(port))
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == f"error: port 127.0.0.1:{port} is busy (held by pid {os.getpid()}, {Path(sys.executable).name}): "
        "stop what uses it or choose another port"
    )
    assert leaked_broker_pids(str(tmp_path)) == []


def _env_without(tool: str, tmp_path: Path) -> dict[str, str]:
    """PATH with every directory holding `tool` removed (python stays reachable through sys.executable)."""
    env = dict(os.environ)
    env.pop("JAVA_HOME", None)
    keep = [d for d in env.get("PATH", "").split(os.pathsep) if d and not (Path(d) / tool).exists()]
    env["PATH"] = os.pathsep.join(keep)
    return env


def test_missing_java_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_cli(
        "broker", "start", "--state-dir", str(tmp_path / "b"), env=_env_without("java", tmp_path)
    )
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error: Java not found")
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_maven_with_empty_cache_is_a_one_line_error(tmp_path: Path) -> None:
    env = _env_without("mvn", tmp_path)
    env["ETHEREAL_KAFKA_HOME"] = str(tmp_path / "empty-cache")
    result = run_cli("broker", "fetch", env=env)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error: Maven (mvn) not found on PATH")


def test_failed_download_is_a_one_line_error(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    mvn = fake / "mvn"
    mvn.write_text(
        "#!/bin/sh\necho '[ERROR] Failed to execute goal: Could not resolve dependencies'\nexit 1\n"
    )
    mvn.chmod(0o755)
    env = _env_without("mvn", tmp_path)
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    env["ETHEREAL_KAFKA_HOME"] = str(tmp_path / "empty-cache")
    result = run_cli("broker", "fetch", env=env)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: failed to download Apache Kafka 4.")
    assert "Could not resolve dependencies" in lines[0]


def test_storage_formats_with_a_cluster_id_that_starts_with_a_dash(tmp_path: Path) -> None:
    """A KRaft cluster id is random base64url: one in 64 starts with `-`, which the storage tool must not take for
    an option (it did: `argument --cluster-id/-t: expected one argument`, a failed broker start)."""
    from ethereal_kafka.broker.jars import ensure_jars
    from ethereal_kafka.broker.local import _find_java, format_storage

    data = tmp_path / "data"
    props = tmp_path / "server.properties"
    props.write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9\n"
        "listeners=PLAINTEXT://127.0.0.1:8,CONTROLLER://127.0.0.1:9\ncontroller.listener.names=CONTROLLER\n"
        f"log.dirs={data}\n"
    )
    format_storage(_find_java(), ensure_jars(), props, data, "-" + "b" * 21)
    assert (data / "meta.properties").read_text().count("cluster.id=-bbbbbbbbbbbbbbbbbbbbb") == 1
