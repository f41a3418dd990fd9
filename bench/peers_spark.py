"""Spark's own JVM Kafka source and sink, the Spark peer of bench/peers.py, and the connector jars it needs.

    .venv/bin/python bench/peers_spark.py --bootstrap HOST:PORT --input IN --output OUT \\
        --checkpoint DIR --jars A.jar,B.jar

A plain PySpark Structured Streaming query on local[2]: `format("kafka")` in and out, `from_json`/`to_json` in the
JVM (no Python per record), `price * 0.908` as a Column (`--workload map`), `trigger(availableNow=True)`. Spark's
Kafka sink is at-least-once (no transactions). Nothing of ethereal-kafka is imported by the query's process.

The connector (`spark-sql-kafka-0-10`) is not in the pip distribution of PySpark: `connector_jars` resolves it once
with Maven from Maven Central into the ethereal-kafka cache, for the installed Spark version or, when that version
is not published, the newest one known to run on it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from peers_workload import PRICE_FACTOR, peer_parser

#: Connector versions tried in order after the installed PySpark's: spark-sql-kafka-0-10_2.13 4.3.0 is not on
#: Maven Central; 4.2.0 (kafka-clients 3.9.2) runs on Spark 4.3.0.
FALLBACK_VERSIONS = ("4.2.0",)
BID_DDL = (
    "id bigint, auction bigint, bidder bigint, price bigint, channel string, url string, date_time bigint, "
    "extra string"
)

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>ethereal-kafka.bench</groupId>
  <artifactId>spark-kafka-connector</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_2.13</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""
_VERSIONED_JAR = re.compile(r"^(?P<name>.+?)-\d[^-]*(-[^-]+)?\.jar$")


def _artifact(jar: str) -> str:
    """`kafka-clients-3.9.2.jar` -> `kafka-clients`."""
    match = _VERSIONED_JAR.match(jar)
    return match.group("name") if match else jar


def _drop_shipped(libs: Path) -> None:
    """Remove from `libs` every jar whose artifact PySpark ships already (Scala, Hadoop client, compression
    libraries): two versions of one library on the classpath would conflict."""
    import pyspark

    shipped = {_artifact(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    for jar in libs.glob("*.jar"):
        if _artifact(jar.name) in shipped:
            jar.unlink()


def connector_jars(cache: Path, spark_version: str) -> tuple[str, list[Path]]:
    """Return the connector version used and its jars (the connector and what it needs beyond PySpark's jars),
    resolving them with Maven into `cache/spark-kafka-<version>/libs` the first time.

    A version already in the cache is used without any network call; otherwise the installed Spark's version is
    tried first, then `FALLBACK_VERSIONS`.

    Raises:
        RuntimeError: Maven is missing, or no version could be resolved.
    """
    versions = list(dict.fromkeys([spark_version, *FALLBACK_VERSIONS]))
    for version in versions:
        libs = cache / f"spark-kafka-{version}" / "libs"
        if (libs / ".complete").exists():
            return version, sorted(libs.glob("*.jar"))
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed once to fetch Spark's Kafka connector from Maven Central")
    errors = []
    for version in versions:
        work = cache / f"spark-kafka-{version}"
        work.mkdir(parents=True, exist_ok=True)
        (work / "pom.xml").write_text(_POM.format(version=version), encoding="utf-8")
        partial = work / "libs.partial"
        shutil.rmtree(partial, ignore_errors=True)
        proc = subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                "-f",
                str(work / "pom.xml"),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={partial}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0 and any(partial.glob("spark-sql-kafka-0-10_2.13-*.jar")):
            _drop_shipped(partial)
            libs = work / "libs"
            shutil.rmtree(libs, ignore_errors=True)
            partial.rename(libs)
            (libs / ".complete").write_text(version, encoding="utf-8")
            return version, sorted(libs.glob("*.jar"))
        first = next((ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln), "no jar")
        errors.append(f"{version}: {first.strip()}")
    raise RuntimeError("could not resolve spark-sql-kafka-0-10: " + "; ".join(errors))


def main() -> None:
    parser = peer_parser(__doc__)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--jars", required=True, help="comma-separated connector jars (connector_jars)")
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("peers-spark-kafka")
        .config("spark.jars", args.jars)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    frame = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .load()
    )
    bids = frame.select("key", F.from_json(F.col("value").cast("string"), BID_DDL).alias("bid")).select(
        "key", "bid.*"
    )
    if args.workload == "map":
        bids = bids.withColumn("price", F.col("price") * F.lit(PRICE_FACTOR))
    out = bids.select("key", F.to_json(F.struct(*[c for c in bids.columns if c != "key"])).alias("value"))
    query = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
