"""docker/: the compose file runs the demo job on a Kafka of the pinned version, and the image can install its Java.

No Docker engine here: the files are checked on paper. The compose file is read with PyYAML when it is installed,
else with a reader of the YAML subset it uses (block maps and lists, JSON-style flow lists and quoted strings).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.broker import kafka_version

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
CLI = str(Path(sys.executable).parent / "ethereal-kafka")
#: Java runtime packages per Debian release (packages.debian.org: openjdk-N-jre-headless).
DEBIAN_JAVA = {"bullseye": {11, 17}, "bookworm": {17}, "trixie": {21, 25}}


def _scalar(text: str) -> Any:
    return json.loads(text) if text[:1] in '["' else text


def _block(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[Any, int]:
    if lines[i][1].startswith("- "):
        items = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            items.append(_scalar(lines[i][1][2:].strip()))
            i += 1
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent:
        key, _, rest = lines[i][1].partition(":")
        i += 1
        if rest.strip():
            mapping[key] = _scalar(rest.strip())
        elif i < len(lines) and lines[i][0] > indent:
            mapping[key], i = _block(lines, i, lines[i][0])
        else:
            mapping[key] = None
    return mapping, i


def read_yaml(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        lines = [
            (len(line) - len(line.lstrip()), line.strip())
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        return _block(lines, 0, 0)[0]
    return yaml.safe_load(text)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = read_yaml(DOCKER / "docker-compose.yml")
    assert isinstance(loaded, dict)
    return loaded


def dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text(encoding="utf-8")


def test_services_run_kafka_then_feed_then_the_job(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"kafka", "feed", "job"}
    assert services["feed"]["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    assert services["job"]["depends_on"] == {"feed": {"condition": "service_completed_successfully"}}
    assert "healthcheck" in services["kafka"]
    for name in ("feed", "job"):
        assert services[name]["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
        assert services[name]["environment"]["ETHEREAL_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"


def test_kafka_image_is_the_pinned_broker_version(compose: dict[str, Any]) -> None:
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{kafka_version()}"


def test_feed_runs_a_module_of_the_package(compose: dict[str, Any]) -> None:
    feed = compose["services"]["feed"]
    assert feed["entrypoint"][:2] == ["python", "-m"]
    assert find_spec(feed["entrypoint"][2]) is not None


def _container_to_repo(volumes: list[str], path: str) -> Path:
    """The repository file a container path of the job service is mounted from (its `host:container[:ro]`)."""
    for volume in volumes:
        host, _, rest = volume.partition(":")
        target = rest.split(":")[0]
        if host.startswith(".") and path.startswith(f"{target}/"):
            return (DOCKER / host / path[len(target) + 1 :]).resolve()
    raise AssertionError(f"{path} is not mounted from the repository: {volumes}")


def test_job_service_runs_a_job_file_that_validates(compose: dict[str, Any]) -> None:
    job = compose["services"]["job"]
    entrypoint = json.loads(re.findall(r"^ENTRYPOINT (.+)$", dockerfile(), re.M)[-1])
    command = [*entrypoint, *job["command"]]
    assert command[:2] == ["ethereal-kafka", "run"] and len(command) == 3, command
    job_file = _container_to_repo(job["volumes"], command[2])
    assert job_file.is_file(), job_file
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(re.findall(r"(ETHEREAL_KAFKA_\w+)=(\S+)", dockerfile()))  # the image's ENV
    env.update(job["environment"])
    done = subprocess.run(
        [CLI, "validate", "--no-plan", str(job_file)],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_base_image_release_has_the_java_it_installs() -> None:
    text = dockerfile()
    base = re.search(r"^FROM python:(\d+)\.(\d+)-slim-(\w+)$", text, re.M)
    assert base is not None, "the base image must name its Debian release (python:3.X-slim-<release>)"
    assert (int(base[1]), int(base[2])) >= (3, 11)
    java = re.search(r"openjdk-(\d+)-jre-headless", text)
    assert java is not None
    assert int(java[1]) >= 17, "Apache Kafka 4 clients and Spark 4 need Java 17+"
    assert int(java[1]) in DEBIAN_JAVA[base[3]], f"Debian {base[3]} has no openjdk-{java[1]}-jre-headless"


def test_dockerfile_copies_what_exists() -> None:
    for source in re.findall(r"^COPY (.+) \S+$", dockerfile(), re.M):
        for name in source.split():
            assert (ROOT / name).exists(), name
