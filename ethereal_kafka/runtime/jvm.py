"""The Spark driver JVM's start-up: a class-data-sharing (AppCDS) archive of the classes a job loads.

Most of a local session's start is the JVM reading, parsing and verifying Spark's classes from jars. Java's
AppCDS keeps them, already parsed, in a memory-mapped archive: `ethereal-kafka spark-archive` (run by
`make install`) runs a small streaming workload once with `-XX:ArchiveClassesAtExit`, and every later embedded
session maps the archive with `-XX:SharedArchiveFile` (measured on the 2-core test machine, under load: session
start 17-18 s -> 9.5-10.5 s, first job 4.7-6.4 s -> 2.0-2.4 s).

The archive lives in the user cache, keyed by the Java executable and the Spark classpath (pyspark's jars), so
another JDK or Spark version resolves to another file. A JVM given an archive that does not match its classpath
ignores it and starts as usual (`-Xshare:auto`, Java's default), so a stale archive costs nothing but the miss.
Nothing here runs at import time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from ethereal_kafka.errors import SparkSetupError
from ethereal_kafka.paths import cache_home
from ethereal_kafka.runtime.spark_home import installed_spark_home, launch_home

log = logging.getLogger(__name__)

OPTIONS_KEY = "spark.driver.extraJavaOptions"
#: Archives kept in the cache (each virtualenv has its own Spark classpath, hence its own archive of ~180 MB): the
#: most recently used ones; a session that maps an archive marks it used (its modification time).
KEEP_ARCHIVES = 3
#: Set to `0` to start sessions without the archive (to compare, or to rule it out).
ENV_SWITCH = "ETHEREAL_KAFKA_SPARK_CDS"
#: Extra Java options for an embedded driver JVM, appended to the job's `spark.driver.extraJavaOptions`. The test
#: kit sets a lean profile for its many short runs (`TEST_DRIVER_OPTIONS`).
OPTIONS_ENV = "ETHEREAL_KAFKA_DRIVER_JAVA_OPTIONS"
#: C1 only and the serial collector: on 2 cores a short local session spends a large share of its CPU in C2
#: compiler and G1 threads (`bench/driver_jvm.py`: 30.5 CPU-s with the defaults, 17.8 with these). Long-running
#: jobs keep the JVM's defaults: C2's code is faster once warm. Bytecode verification of the classes loaded from
#: Spark's jars (and the classes its code generator compiles) is skipped too: ~1.2-2.8 CPU-s less per `run` start
#: measured in three interleaved rounds of restarts (`bench/driver_jvm.py` has the profile); the jars are the ones
#: pip installed, and what a test checks is the framework's behaviour, not the JVM's.
TEST_DRIVER_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
)

#: The heap of an embedded driver JVM, unless the job's Java options already choose a collector or size the heap:
#: the serial collector, a 48 MB young generation and a 128 MB initial heap. Java's default on this machine (G1, a
#: 1/64-of-RAM initial heap) kept 220-400 MB of heap resident for a live set near 60-100 MB (a stateless job),
#: plus ~48 MB of its own structures; the serial collector grows the heap only as far as the live data needs, up
#: to `spark.driver.memory`. docs/performance.md ("Memory over a long backlog") has the figures.
LEAN_HEAP_OPTIONS: Mapping[str, str] = {
    "-XX:+UseSerialGC": r"-XX:[+-]Use\w*GC\b",
    "-Xmn48m": r"-Xmn|-XX:(Max)?NewSize|-XX:NewRatio",
    "-Xms128m": r"-Xms|-XX:InitialHeapSize",
}


def with_lean_heap(conf: Mapping[str, str]) -> dict[str, str]:
    """`conf` with each of `LEAN_HEAP_OPTIONS` added to the driver's Java options that no option already there (or
    in `ETHEREAL_KAFKA_DRIVER_JAVA_OPTIONS`) contradicts; nothing when those options choose another collector than
    the serial one. Called for embedded sessions only: under spark-submit the JVM is already running."""
    out = dict(conf)
    existing = f"{out.get(OPTIONS_KEY, '')} {os.environ.get(OPTIONS_ENV, '')}"
    collector = re.findall(r"-XX:\+Use(\w*)GC\b", existing)
    if collector and collector != ["Serial"]:  # another collector sizes its heap its own way
        return out
    lean = [option for option, taken in LEAN_HEAP_OPTIONS.items() if not re.search(taken, existing)]
    if lean:
        out[OPTIONS_KEY] = f"{out.get(OPTIONS_KEY, '')} {' '.join(lean)}".strip()
    return out


def _java() -> Path | None:
    """The java executable Spark's launcher will run (`JAVA_HOME`, else `java` on PATH), resolved."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    found = str(candidate) if candidate is not None and candidate.exists() else shutil.which("java")
    return Path(found).resolve() if found else None


def archive_path() -> Path | None:
    """Where the archive for this Java and this Spark lives (whether or not it exists); None without Java."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = installed_spark_home() / "jars"
    digest = hashlib.sha256()
    # The class path a JVM records in the archive names the jars through the SPARK_HOME it launched from.
    digest.update(f"{java}:{java.stat().st_mtime_ns}:{jars}:{launch_home()}".encode())
    for jar in sorted(jars.glob("*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    return cache_home() / "spark-cds" / f"spark-{pyspark.__version__}-{digest.hexdigest()[:12]}.jsa"


def with_archive(conf: Mapping[str, str]) -> dict[str, str]:
    """`conf` with `ETHEREAL_KAFKA_DRIVER_JAVA_OPTIONS` and the archive added to the driver's Java options; the
    archive when it exists and the settings do not already choose one (or `ETHEREAL_KAFKA_SPARK_CDS=0`)."""
    out = dict(conf)
    extra = os.environ.get(OPTIONS_ENV, "").strip()
    if extra:
        out[OPTIONS_KEY] = f"{out.get(OPTIONS_KEY, '')} {extra}".strip()
    existing = out.get(OPTIONS_KEY, "")
    if (
        os.environ.get(ENV_SWITCH) == "0"
        or "SharedArchiveFile" in existing
        or "ArchiveClassesAtExit" in existing
    ):
        return out
    path = archive_path()
    if path is None or not path.is_file():
        return out
    _mark_used(path)
    out[OPTIONS_KEY] = f"{existing} -XX:SharedArchiveFile={path}".strip()
    return out


def build_archive(timeout_s: float = 600.0) -> Path:
    """Create the archive (replacing an older one for the same Java and Spark): run `jvm_archive.workload` in a child
    Python
    whose driver JVM dumps the classes it loaded when it exits; returns the archive's path.

    Raises:
        SparkSetupError: no Java, or the workload failed or wrote no archive.
    """
    target = archive_path()
    if target is None:
        raise SparkSetupError("Java not found (no JAVA_HOME, no java on PATH): install a JDK 17 or newer")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    began = time.monotonic()
    env = {**os.environ, ENV_SWITCH: "0"}
    done = subprocess.run(
        [sys.executable, "-m", "ethereal_kafka.runtime.jvm_archive", str(partial)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise SparkSetupError(f"building the Spark class archive failed: {last[0]}")
    os.replace(partial, target)
    _prune(target.parent, keep=target)
    log.info(
        "Spark class archive %s (%.0f MB) in %.1fs",
        target,
        target.stat().st_size / 1e6,
        time.monotonic() - began,
    )
    return target


def _mark_used(archive: Path) -> None:
    """Set the archive's modification time to now, so pruning (which keeps the most recently used) spares it: a
    developer's checkout keeps its archive while other virtualenvs (clean clones, worktrees) build theirs. A
    read-only cache is not an error: the archive is still used."""
    try:
        os.utime(archive)
    except OSError as exc:
        log.debug("could not mark %s used: %s", archive, exc)


def _prune(folder: Path, keep: Path) -> None:
    """Remove all but the `KEEP_ARCHIVES` most recently used archives (always keeping `keep`) and stale partial
    files."""
    archives = sorted(folder.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [a for a in archives if a != keep][KEEP_ARCHIVES - 1 :]:
        old.unlink(missing_ok=True)
    for partial in folder.glob("*.partial"):
        if time.time() - partial.stat().st_mtime > 3600:
            partial.unlink(missing_ok=True)
