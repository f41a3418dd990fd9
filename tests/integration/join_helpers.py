"""Helpers shared by the join and lookup tests."""

from __future__ import annotations

from ethereal_kafka.testing.plugin import RunJob
from tests.integration.api_helpers import ApiJob

#: Failures that are not the job's, after which it is simply run again (it resumes from its checkpoint, exactly
#: once): a Python worker that did not connect back in time (a machine overloaded by other work), and a Spark 4.3
#: race between queries of one job starting together: each query's Python streaming source runner adds settings to
#: the environment map of the data source's (shared) `PythonFunction` while another query serializes a task that
#: holds that map, and the task fails to deserialize (`java.io.OptionalDataException`).
INFRA_ERRORS = ("Python worker failed to connect back", "OptionalDataException")


def run_to_end(run_job: RunJob, job: ApiJob, attempts: int = 3, env: dict[str, str] | None = None) -> None:
    """Run `job` (in-process) until it consumed its input, again after one of `INFRA_ERRORS`; any other failure
    fails the test."""
    for _ in range(attempts):
        result = run_job(job.path, env=env, check=False)
        if result.ok:
            return
        assert any(e in str(result.error) for e in INFRA_ERRORS), str(result.error)
    raise AssertionError(f"{job.path}: {attempts} runs failed, each with one of {INFRA_ERRORS}")
