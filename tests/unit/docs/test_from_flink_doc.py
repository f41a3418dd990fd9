"""docs/from-flink.md (issue 24, item 10): its walkthrough files validate and build as the page shows them, its
pipeline is the example the integration suite runs (`tests/integration/test_fraud_walkthrough.py`), and the page
maps every class the API exports."""

from __future__ import annotations

import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import ethereal_kafka.api as api
from ethereal_kafka.api import graph as g
from ethereal_kafka.api.environment import StreamExecutionEnvironment
from ethereal_kafka.config.job import load_job
from ethereal_kafka.examples import fraud_walkthrough
from tests.doc_blocks import ROOT, write_doc_files

CLI = str(Path(sys.executable).parent / "ethereal-kafka")
PAGE = "from-flink.md"


def test_the_walkthrough_files_validate_and_build_the_graph_the_page_describes(tmp_path: Path) -> None:
    files = write_doc_files(PAGE, tmp_path)
    assert set(files) == {
        "fraud_job/fraud_detection.py",
        "fraud_job/job.properties",
        "fraud_job/transactions.properties",
        "fraud_job/alerts.properties",
    }
    job = files["fraud_job/job.properties"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [CLI, "validate", "--no-plan", str(job)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ok (job 'fraud-detection', sources transactions, sinks alerts, exactly-once)" in done.stdout

    spec = importlib.util.spec_from_file_location(
        "from_flink_fraud_detection", files["fraud_job/fraud_detection.py"]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # `inspect.getsource` of its classes looks the module up
    try:
        spec.loader.exec_module(module)
        _check_graph_and_source(module, job)
    finally:
        del sys.modules[spec.name]


def _check_graph_and_source(module: object, job: Path) -> None:
    environment = StreamExecutionEnvironment.for_job(load_job(job))
    module.build(environment)  # type: ignore[attr-defined]
    graph = environment.graph()
    assert [type(n).__name__ for n in graph.nodes] == [
        "SourceNode",
        "WatermarkNode",
        "KeyByNode",
        "ProcessNode",
        "SinkNode",
    ]
    process = next(n for n in graph.nodes if isinstance(n, g.ProcessNode))
    assert process.label == "'fraud-detector' (uid fraud-detector)"
    assert process.output_type == "id long, ts long"

    # The page shows the code the integration suite runs, verbatim.
    for name in ("FraudDetector", "build"):
        assert inspect.getsource(getattr(module, name)) == inspect.getsource(
            getattr(fraud_walkthrough, name)
        ), name


def test_the_page_maps_every_class_the_api_exports_and_the_readme_links_it() -> None:
    text = (ROOT / "docs" / PAGE).read_text(encoding="utf-8")
    unmapped = [name for name in api.__all__ if f"`{name}" not in text and f"{name}`" not in text]
    assert unmapped == [], f"docs/{PAGE} does not mention {unmapped}"
    for heading in ("## Class by class", "## What differs, in short", "## What is missing"):
        assert heading in text
    assert f"`docs/{PAGE}`" in (ROOT / "README.md").read_text(encoding="utf-8")
