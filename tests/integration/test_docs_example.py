"""The example test of docs/testing-your-job.md, run verbatim: its project files are copied from the page into a
folder, and its test functions are called with this session's fixtures (`kafka_cluster`, `topic_factory`,
`run_job`, `tmp_path`), as pytest would call them in a user's project."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import pytest

from ethereal_kafka.testing import KafkaCluster, produce, read_committed
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.doc_blocks import write_doc_files

PAGE = "testing-your-job.md"
TEST_FILE = "tests/test_large_orders.py"


def test_the_documented_example_test_passes(
    tmp_path: Path, request: pytest.FixtureRequest, kafka_cluster: object, spark: object
) -> None:
    """(`kafka_cluster` and `spark` are asked for here only so that their start counts as set-up, not as the
    example's run.)"""
    files = write_doc_files(PAGE, tmp_path / "project")
    source = files[TEST_FILE]
    namespace: dict[str, object] = {"__file__": str(source), "__name__": "test_large_orders"}
    exec(compile(source.read_text(encoding="utf-8"), str(source), "exec"), namespace)
    tests = {name: f for name, f in namespace.items() if name.startswith("test_") and inspect.isfunction(f)}
    assert tests, f"{PAGE} shows no test function in {TEST_FILE}"
    for function in tests.values():
        kwargs = {name: request.getfixturevalue(name) for name in inspect.signature(function).parameters}
        function(**kwargs)


SHOUTING = """\
from pyspark.sql import functions as F


def loud(name):
    return name.upper()


def build(env):
    shout = F.udf(loud, "string")  # `loud` is pickled by reference: the workers import this module
    orders = env.from_source("orders")
    orders.with_columns(customer=shout(F.col("customer"))).select("order_id", "customer").sink_to("large-orders")
"""


def test_a_python_function_beside_the_job_file_runs_on_the_workers(
    tmp_path: Path, kafka_cluster: KafkaCluster, topic_factory: TopicFactory, run_job: RunJob
) -> None:
    """The workers import a pipeline module that sits beside the job file (and nowhere on their PYTHONPATH), as
    `ethereal-kafka run` lets them: the doc's project with a pipeline whose UDF is a function of that module."""
    files = write_doc_files(PAGE, tmp_path / "project")
    job = files["jobs/orders/job.properties"]
    job.write_text(job.read_text().replace("pipeline=large_orders:build", "pipeline=shouting_orders:build"))
    (job.parent / "shouting_orders.py").write_text(SHOUTING)
    orders, out = topic_factory(), topic_factory()
    produce(
        kafka_cluster.bootstrap,
        orders,
        [(None, json.dumps({"order_id": 1, "customer": "ana", "amount": 1.0}).encode())],
    )
    env = {
        "KAFKA_BOOTSTRAP": kafka_cluster.bootstrap,
        "ORDERS_TOPIC": orders,
        "LARGE_ORDERS_TOPIC": out,
        "APP_ID": f"test-{out}",
        "CHECKPOINT_DIR": str(tmp_path / "checkpoint"),
    }
    assert str(job.parent) not in os.environ.get("PYTHONPATH", "")
    run_job(job, env=env)
    assert [r.json() for r in read_committed(kafka_cluster.bootstrap, out)] == [
        {"order_id": 1, "customer": "ANA"}
    ]
