"""The `SPARK_HOME` an embedded session launches Spark from: the installed pyspark's, without its Python zips.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on the `PYTHONPATH` of every Python
process it starts: the worker daemon, the streaming source runner, the data source planners. Python imports from
a zip without caching compiled code, so each of those processes compiled PySpark from source: importing
`pyspark.sql.streaming.python_streaming_source_runner` costs 0.77-0.82 CPU-s from the zip against 0.25-0.30 from
the installed package (measured on the 2-core test machine), several times per job start and once per source and
query. The zips hold the same PySpark as the installed package (pip's pyspark ships both), so an embedded session
is launched from a mirror of the installed `SPARK_HOME` (a folder of symbolic links to its entries) whose
`python/lib` is empty: Spark still names the zips on the path, Python skips paths that do not exist, and the
processes import the installed PySpark with its compiled caches.

The mirror lives in the user cache, one per pyspark installation (keyed by its folder). A `SPARK_HOME` already in
the environment is kept, and spark-submit's driver is left alone (its JVM is already running).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

from ethereal_kafka.paths import cache_home

#: Set to `0` to launch from the installed pyspark folder itself (to compare, or to rule the mirror out).
ENV_SWITCH = "ETHEREAL_KAFKA_SPARK_HOME_MIRROR"


def installed_spark_home() -> Path:
    """The installed pyspark package folder: Spark's `bin/`, `jars/` and the rest of a distribution."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def mirror_path(real: Path) -> Path:
    """Where the mirror of `real` lives (whether or not it exists)."""
    import pyspark

    digest = hashlib.sha256(str(real).encode()).hexdigest()[:12]
    return cache_home() / "spark-home" / f"pyspark-{pyspark.__version__}-{digest}"


def ensure_mirror(real: Path | None = None) -> Path:
    """Create (once) and return the mirror of `real` (default: the installed pyspark): a symbolic link to each of
    its entries but `python/`, and an empty `python/lib`. Safe when several processes create it at once (each
    builds its own and renames it into place; the first rename wins)."""
    real = real or installed_spark_home()
    target = mirror_path(real)
    if (target / "jars").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    for entry in real.iterdir():
        if entry.name != "python":
            (scratch / entry.name).symlink_to(entry)
    (scratch / "python" / "lib").mkdir(parents=True)
    try:
        scratch.rename(target)
    except OSError:  # another process put its mirror there first
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _mirrored() -> bool:
    """Whether a session started now launches from the mirror (no `SPARK_HOME` set, the switch not `0`)."""
    return "SPARK_HOME" not in os.environ and os.environ.get(ENV_SWITCH, "1") != "0"


def launch_home() -> Path:
    """The `SPARK_HOME` a session started now would launch from (`use_mirror`'s choice, without making it)."""
    if "SPARK_HOME" in os.environ:
        return Path(os.environ["SPARK_HOME"])
    real = installed_spark_home()
    return mirror_path(real) if _mirrored() else real


def use_mirror() -> None:
    """Point `SPARK_HOME` at the mirror for the Spark this process is about to launch, unless `SPARK_HOME` is
    already set or `ETHEREAL_KAFKA_SPARK_HOME_MIRROR=0`. A mirror that cannot be made (a read-only cache) leaves
    the environment as it was: Spark then runs from the installed folder, only slower to start its processes."""
    if _mirrored():
        with contextlib.suppress(OSError):
            os.environ["SPARK_HOME"] = str(ensure_mirror())
