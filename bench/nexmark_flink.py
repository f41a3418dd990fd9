"""Nexmark on Apache Flink through PyFlink's SQL API, the `flink-eos` and `flink-alo` systems of bench/nexmark.py,
and the virtualenv and connector jar it runs with.

    ~/.cache/ethereal-kafka/bench/flink-venv/bin/python bench/nexmark_flink.py --query q5 \\
        --bootstrap HOST:PORT --topics bids=T --output OUT --guarantee exactly-once --jar flink-sql-connector-kafka.jar

Flink is not a dependency of ethereal-kafka: `ensure_venv` creates a virtualenv of its own under the ethereal-kafka
cache (from bench/requirements-flink.txt, PyFlink 2.2) and `connector_jar` fetches the Kafka SQL connector of the
matching version (`org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2`, one shaded jar) with Maven into the same
cache. The job is what Flink's SQL documentation shows: a `TableEnvironment` in streaming mode (a local mini
cluster in PyFlink's JVM), parallelism 2, Kafka source tables with the kind's JSON fields (`lines`: the `raw` format)
and a watermark of 5 s on `date_time` (`lines`: on the record timestamp), the queries as Nexmark's Flink SQL with
window table-valued functions (window aggregations, window joins), a Kafka sink table writing JSON (timestamps as
ISO-8601 in UTC). Checkpointing every `--checkpoint-ms` (default 1 s, like ethereal-kafka's 1 s epochs):

- `exactly-once`: checkpoints in EXACTLY_ONCE mode, the sink's `sink.delivery-guarantee=exactly-once`
  (a Kafka transaction per checkpoint and subtask; readers see its records once the checkpoint completes);
- `at-least-once`: AT_LEAST_ONCE checkpoints, the sink flushes at each checkpoint, no transactions.

Flink's defaults otherwise (heap state backend). The job runs until it is stopped (SIGTERM): bench/nexmark.py
stops it once every expected output row is readable.

Each topic is read by one Kafka reader (`scan.parallelism = 1`, both partitions in one reader, each with its own
watermark; every other operator at parallelism 2). With two readers per topic, measured on q8 over a backlog, one
reader got its partition seconds after the other, and until then Flink counted it idle: the watermark followed the
other partition alone and Flink dropped the first partition's first ~35 s of event time as late (309 of 7,281 rows
lost). One reader takes both partitions at once, so the watermark is the smaller of the two from the start.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nexmark_model as model

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements-flink.txt"
#: The Kafka SQL connector built for the PyFlink version in requirements-flink.txt.
CONNECTOR = "org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2"
GUARANTEES = {"exactly-once": "EXACTLY_ONCE", "at-least-once": "AT_LEAST_ONCE"}


def ensure_venv(cache: Path) -> Path:
    """Return the Python interpreter of the bench's PyFlink virtualenv under `cache`, creating it (with pip, from
    bench/requirements-flink.txt) on first use or when the requirements changed.

    Raises:
        subprocess.CalledProcessError: venv or pip failed.
    """
    folder = cache / "bench" / "flink-venv"
    python = folder / "bin" / "python"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    stamp = folder / f".installed-{digest}"
    if stamp.exists():
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True)
    stamp.touch()
    return python


def connector_jar(cache: Path) -> Path:
    """Return the Kafka SQL connector jar, fetched with Maven from Maven Central into `cache` the first time.

    Raises:
        RuntimeError: Maven is missing or could not fetch the jar.
    """
    _group, artifact, version = CONNECTOR.split(":")
    folder = cache / "bench" / f"flink-kafka-{version}"
    jar = folder / "libs" / f"{artifact}-{version}.jar"
    if jar.exists():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(
            "Maven (mvn) is needed once to fetch Flink's Kafka SQL connector from Maven Central"
        )
    partial = folder / "libs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    proc = subprocess.run(
        [mvn, "-B", "-q", "dependency:copy", f"-Dartifact={CONNECTOR}", f"-DoutputDirectory={partial}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not (partial / jar.name).exists():
        raise RuntimeError(f"could not fetch {CONNECTOR}: {(proc.stdout + proc.stderr)[-500:]}")
    shutil.rmtree(jar.parent, ignore_errors=True)
    partial.rename(jar.parent)
    return jar


# -- the job ------------------------------------------------------------------------------------------------------
_FLINK_TYPES = {"bigint": "BIGINT", "string": "STRING"}


def _columns(kind: str) -> str:
    pairs = [field.strip().split(" ") for field in model.SCHEMAS[kind].split(",")]
    return ", ".join(f"`{name}` {_FLINK_TYPES[kind_]}" for name, kind_ in pairs)


def source_ddl(kind: str, topic: str, bootstrap: str, group: str, parallelism: int) -> str:
    """The Kafka source table of a kind, with `ts` its watermarked event time, read by `parallelism` readers."""
    common = (
        f"'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}', "
        f"'properties.group.id' = '{group}', 'scan.startup.mode' = 'earliest-offset', "
        f"'scan.parallelism' = '{parallelism}'"
    )
    watermark = f"WATERMARK FOR ts AS ts - INTERVAL '{model.OUT_OF_ORDER_MS // 1000}' SECOND"
    if kind == "lines":
        return (
            f"CREATE TABLE lines (`value` STRING, ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp', {watermark}) "
            f"WITH ({common}, 'format' = 'raw')"
        )
    return (
        f"CREATE TABLE {kind} ({_columns(kind)}, ts AS TO_TIMESTAMP_LTZ(date_time, 3), {watermark}) "
        f"WITH ({common}, 'format' = 'json')"
    )


#: Each query's output columns (Flink types) and its SELECT (Nexmark's Flink SQL, with window TVFs).
W = f"INTERVAL '{model.WINDOW_MS // 1000}' SECOND"
S = f"INTERVAL '{model.SLIDE_MS // 1000}' SECOND"
QUERIES: dict[str, tuple[str, str]] = {
    "q0": (
        "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, date_time BIGINT, extra STRING",
        "SELECT auction, bidder, price, channel, url, date_time, extra FROM bids",
    ),
    "q1": (
        "auction BIGINT, bidder BIGINT, price DOUBLE, channel STRING, url STRING, date_time BIGINT, extra STRING",
        f"SELECT auction, bidder, price * {model.EURO}E0, channel, url, date_time, extra FROM bids",
    ),
    "q2": (
        "auction BIGINT, price BIGINT",
        f"SELECT auction, price FROM bids WHERE MOD(auction, {model.Q2_MODULUS}) = 0",
    ),
    # Counts per auction per hopping window; their maximum per hopping window (a tumbling 2 s window over the
    # counts' window_time, the hopping window's last instant); a window join of the two keeps the top auctions.
    "q5": (
        "auction BIGINT, num BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)",
        f"""
        WITH counts AS (
          SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime, window_time AS wt
          FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), {S}, {W}))
          GROUP BY auction, window_start, window_end, window_time
        )
        SELECT C.auction, C.num, C.starttime, C.endtime
        FROM (SELECT * FROM TABLE(TUMBLE(TABLE counts, DESCRIPTOR(wt), {S}))) C
        JOIN (
          SELECT starttime, endtime, MAX(num) AS maxn, window_start, window_end
          FROM TABLE(TUMBLE(TABLE counts, DESCRIPTOR(wt), {S}))
          GROUP BY starttime, endtime, window_start, window_end
        ) M
        ON C.window_start = M.window_start AND C.window_end = M.window_end
          AND C.starttime = M.starttime AND C.num = M.maxn
        """,
    ),
    # The highest price per tumbling window joined back to the window's bids (a window join).
    "q7": (
        "auction BIGINT, price BIGINT, bidder BIGINT, date_time BIGINT, extra STRING",
        f"""
        SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
        FROM (SELECT * FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), {W}))) B
        JOIN (
          SELECT MAX(price) AS maxprice, window_start, window_end
          FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), {W}))
          GROUP BY window_start, window_end
        ) M
        ON B.window_start = M.window_start AND B.window_end = M.window_end AND B.price = M.maxprice
        """,
    ),
    # Nexmark's q8: persons and sellers grouped per tumbling window, window-joined.
    "q8": (
        "id BIGINT, name STRING, starttime TIMESTAMP(3)",
        f"""
        SELECT P.id, P.name, P.starttime
        FROM (
          SELECT id, name, window_start AS starttime, window_end AS endtime
          FROM TABLE(TUMBLE(TABLE persons, DESCRIPTOR(ts), {W}))
          GROUP BY id, name, window_start, window_end
        ) P
        JOIN (
          SELECT seller, window_start AS starttime, window_end AS endtime
          FROM TABLE(TUMBLE(TABLE auctions, DESCRIPTOR(ts), {W}))
          GROUP BY seller, window_start, window_end
        ) A
        ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime
        """,
    ),
    # The lines' words are lower case and separated by single spaces (nexmark_model), so SPLIT on ' ' is the
    # others' split on non-alphanumerics (`words`: VIEWS).
    "wc": (
        "word STRING, window_start TIMESTAMP(3), `count` BIGINT",
        f"""
        SELECT word, window_start, COUNT(*) AS `count`
        FROM TABLE(TUMBLE(TABLE words, DESCRIPTOR(ts), {W}))
        WHERE word <> ''
        GROUP BY word, window_start, window_end
        """,
    ),
}


#: Views a query reads (a window table function takes a table or view, not a subquery).
VIEWS: dict[str, str] = {
    "wc": "CREATE TEMPORARY VIEW words AS "
    "SELECT word, ts FROM lines CROSS JOIN UNNEST(SPLIT(LOWER(`value`), ' ')) AS w(word)",
}


def sink_ddl(query: str, topic: str, bootstrap: str, guarantee: str, prefix: str) -> str:
    """The Kafka sink table of a query's output (JSON, ISO-8601 timestamps; transactional for exactly-once)."""
    columns, _ = QUERIES[query]
    options = [
        "'connector' = 'kafka'",
        f"'topic' = '{topic}'",
        f"'properties.bootstrap.servers' = '{bootstrap}'",
        "'format' = 'json'",
        "'json.timestamp-format.standard' = 'ISO-8601'",
        f"'sink.delivery-guarantee' = '{guarantee}'",
    ]
    if guarantee == "exactly-once":
        # The broker's transaction.max.timeout.ms is 15 minutes; Flink's producer default (1 h) is refused.
        options += [
            f"'sink.transactional-id-prefix' = '{prefix}'",
            "'properties.transaction.timeout.ms' = '600000'",
        ]
    return f"CREATE TABLE results ({columns}) WITH ({', '.join(options)})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--query", required=True, choices=list(QUERIES))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topics", required=True, help="comma-separated kind=topic")
    parser.add_argument("--output", required=True)
    parser.add_argument("--guarantee", choices=list(GUARANTEES), default="exactly-once")
    parser.add_argument("--jar", required=True, help="flink-sql-connector-kafka (connector_jar)")
    parser.add_argument("--name", default="nexmark", help="group id and transactional id prefix")
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--source-parallelism",
        type=int,
        default=1,
        help="Kafka readers per topic (1: one reader holds both partitions, see the module docstring)",
    )
    args = parser.parse_args()
    topics = dict(pair.split("=", 1) for pair in args.topics.split(","))

    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    for key, value in {
        "pipeline.jars": Path(args.jar).resolve().as_uri(),
        "parallelism.default": str(args.parallelism),
        "table.local-time-zone": "UTC",
        "execution.checkpointing.interval": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.mode": GUARANTEES[args.guarantee],
        "execution.checkpointing.dir": Path(tempfile.mkdtemp(prefix="ek-flink-ckpt-")).as_uri(),
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
    }.items():
        config.set(key, value)
    for kind in model.QUERIES[args.query]:
        group = f"{args.name}-{kind}"
        env.execute_sql(source_ddl(kind, topics[kind], args.bootstrap, group, args.source_parallelism))
    if args.query in VIEWS:
        env.execute_sql(VIEWS[args.query])
    env.execute_sql(sink_ddl(args.query, args.output, args.bootstrap, args.guarantee, args.name))
    _, select = QUERIES[args.query]
    result = env.execute_sql(f"INSERT INTO results {select}")
    result.wait()


if __name__ == "__main__":
    main()
