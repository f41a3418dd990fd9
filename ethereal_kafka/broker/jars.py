"""Resolve the pinned Apache Kafka broker jars from Maven Central into a user cache directory.

The first call runs Maven once on the packaged `resources/pom.xml`; later calls find the completed cache and do no
network I/O, so the broker starts offline once it has started online.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from ethereal_kafka.errors import BrokerError
from ethereal_kafka.paths import cache_home

_COMPLETE_MARKER = ".complete"


def manifest_text() -> str:
    """Return the packaged pinned dependency manifest (a Maven pom)."""
    return resources.files("ethereal_kafka.broker").joinpath("resources/pom.xml").read_text(encoding="utf-8")


def kafka_version() -> str:
    """Return the Apache Kafka version pinned in the manifest."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", manifest_text())
    if match is None:  # pragma: no cover - the packaged manifest always pins it
        raise BrokerError("the broker manifest pins no <kafka.version>")
    return match.group(1)


def libs_dir() -> Path:
    """Return the directory the broker classpath lives in, keyed by a digest of the manifest.

    A changed manifest (new pinned version) resolves into a new directory; the old one is left for `rm -rf`.
    """
    digest = hashlib.sha256(manifest_text().encode()).hexdigest()[:12]
    return cache_home() / f"kafka-{kafka_version()}-{digest}" / "libs"


def ensure_jars(*, quiet: bool = True) -> Path:
    """Return the broker's classpath directory, resolving it from Maven Central on first use.

    Called by `LocalBroker.start` before every start; cheap once the cache is complete.

    Raises:
        BrokerError: Maven is missing, or the download failed (the message gives Maven's first error line).
    """
    libs = libs_dir()
    if (libs / _COMPLETE_MARKER).exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            f"Maven (mvn) not found on PATH: it is needed once to fetch Apache Kafka {kafka_version()} jars "
            f"into {libs.parent}; install Maven or copy a filled cache there"
        )
    work = libs.parent
    work.mkdir(parents=True, exist_ok=True)
    pom = work / "pom.xml"
    pom.write_text(manifest_text(), encoding="utf-8")
    partial = work / "libs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        "-q" if quiet else "-ntp",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={partial}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not any(partial.glob("kafka_2.13-*.jar")):
        lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln or ln.strip()]
        first = lines[0] if lines else f"mvn exited with {proc.returncode}"
        raise BrokerError(
            f"failed to download Apache Kafka {kafka_version()} jars from Maven Central: {first}"
        )
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    (libs / _COMPLETE_MARKER).write_text(kafka_version(), encoding="utf-8")
    return libs
