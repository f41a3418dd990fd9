"""librdkafka's own log lines never reach the terminal: a process that configured nothing (a Spark Python worker of
a local run) writes them to `$ETHEREAL_KAFKA_WORKER_LOG_DIR/librdkafka-workers.log`, or drops them without that variable.
Real processes and real clients; the address answers nobody, so no broker is needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ethereal_kafka.connectors.kafka.clients import LOG_DIR_ENV, WORKERS_LOG

PROGRAM = """
import sys
from ethereal_kafka.connectors.kafka.clients import cached_consumer, close_cached_clients, consumer_config
consumer = cached_consumer(consumer_config(sys.argv[1], "g", "read_committed", {}))
consumer.consume(num_messages=1, timeout=1.5)  # serves the queued log lines
close_cached_clients()
"""


def _client_process(address: str, log_dir: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != LOG_DIR_ENV}
    if log_dir is not None:
        env[LOG_DIR_ENV] = str(log_dir)
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, address], capture_output=True, text=True, timeout=60, env=env
    )


def test_a_worker_writes_librdkafka_lines_to_the_log_folder_not_stderr(
    tmp_path: Path, refused_address: str
) -> None:
    address = refused_address
    done = _client_process(address, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert f"Connect to ipv4#{address} failed" in (tmp_path / WORKERS_LOG).read_text()


def test_without_a_log_folder_the_lines_are_dropped(refused_address: str) -> None:
    done = _client_process(refused_address, None)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


TEST_KIT_PRODUCE = """
import sys, time
from ethereal_kafka.testing import produce

def records():
    time.sleep(1.5)  # librdkafka tries the address meanwhile and has lines to log
    raise SystemExit(0)
    yield (None, b"never")

produce(sys.argv[1], "t", records())
"""


def test_the_test_kits_producer_routes_librdkafka_lines_like_the_runtime(
    tmp_path: Path, refused_address: str
) -> None:
    """Issue 24, item 6: `testing.produce` printed librdkafka's lines (`%4|...|GETPID|... Coordinator load in
    progress` on a broker that just started; here a refused connection) on stderr."""
    address = refused_address
    env = {k: v for k, v in os.environ.items() if k != LOG_DIR_ENV}
    env[LOG_DIR_ENV] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", TEST_KIT_PRODUCE, address], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
