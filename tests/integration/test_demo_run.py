"""Issue 24, item 6: `ethereal-kafka demo` is as quiet as `run`.

The demo runs as a user starts it (a subprocess: the noise was the JVM's and librdkafka's own output), on the
session broker (`--bootstrap`, so no second broker starts) with its own topics and few records (one epoch per
query). Its output holds none of what it printed before (the JVM's incubator warning, log4j's banner, Spark's
warnings, librdkafka's GETPID line, the configuration dumps); it tells its two queries' epochs apart, prints the web
UI's address and one line saying what to try next, and still checks its output against the reference.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from ethereal_kafka.testing.cluster import KafkaCluster

CLI = str(Path(sys.executable).parent / "ethereal-kafka")

#: What the demo printed before (issue 24, item 6), none of which may come back.
NOISE = (
    "WARNING: Using incubator modules",
    "log4j",
    "Setting default log level",
    "NativeCodeLoader",
    "ResolveWriteToStream",
    "Disabling AQE",
    "GETPID",
    "JobConfig(",
    "KafkaSourceConfig(",
    "KafkaSinkConfig(",
)


def test_the_demo_prints_only_its_own_lines_and_the_runs(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        "DEMO_INPUT_TOPIC": f"demo-orders-{suffix}",
        "DEMO_OUTPUT_TOPIC": f"demo-large-orders-{suffix}",
        "DEMO_REVENUE_TOPIC": f"demo-revenue-{suffix}",
        "ETHEREAL_KAFKA_LOG_DIR": str(tmp_path / "logs"),
    }
    done = subprocess.run(
        [CLI, "demo", "--bootstrap", kafka_cluster.bootstrap, "--records", "300"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    shown = done.stdout + done.stderr
    print(shown)
    assert done.returncode == 0, shown[-4000:]
    assert [n for n in NOISE if n in shown] == [], shown[-4000:]
    lines = shown.splitlines()
    assert any(" INFO ethereal-kafka: ui at http://127.0.0.1:" in line for line in lines), shown
    assert (
        "[demo]   large-orders epoch 0: committed" in shown and "[demo]   revenue epoch 0: committed" in shown
    )
    assert sum(1 for line in lines if line.startswith("[demo] try next: ")) == 1
    assert "matches the plain-Python reference" in done.stdout
    # The full story is in the run's log folder.
    logs = next((tmp_path / "logs").iterdir())
    assert (logs / "spark.log").exists() and (logs / "jvm-output.log").exists(), sorted(logs.iterdir())
