"""The example test of docs/testing-your-job.md, run verbatim: its project files are copied from the page into a
folder, and its test functions are called with this session's fixtures (`kafka_cluster`, `topic_factory`,
`run_job`, `tmp_path`), as pytest would call them in a user's project."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

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
