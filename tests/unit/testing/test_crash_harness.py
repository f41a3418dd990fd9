"""The crash harness's notion of "recovery is over": every query of the run committed an epoch."""

from __future__ import annotations

from pathlib import Path

from ethereal_kafka.testing.crash import _log_files, _queries_without_a_commit


def _epoch(root: Path, query: str, log: str, epoch: int) -> None:
    folder = root / query / log
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(epoch)).write_text("v1\n")


def test_a_run_is_recovered_only_once_every_query_committed_an_epoch(tmp_path: Path) -> None:
    for query in ("stateless", "running_total"):
        _epoch(tmp_path, query, "offsets", 0)
        _epoch(tmp_path, query, "commits", 0)
    before = _log_files(tmp_path, "commits")
    _epoch(tmp_path, "stateless", "offsets", 1)
    _epoch(tmp_path, "running_total", "offsets", 1)
    assert _queries_without_a_commit(tmp_path, before) == {"*"}  # nothing committed in this run yet
    _epoch(tmp_path, "stateless", "commits", 1)
    assert _queries_without_a_commit(tmp_path, before) == {
        "running_total"
    }  # the fast query alone is not enough
    _epoch(tmp_path, "running_total", "commits", 1)
    assert _queries_without_a_commit(tmp_path, before) == set()


def test_a_query_that_starts_in_this_run_counts_too(tmp_path: Path) -> None:
    _epoch(tmp_path, "a", "offsets", 0)
    before = _log_files(tmp_path, "commits")
    _epoch(tmp_path, "a", "commits", 0)
    _epoch(tmp_path, "b", "offsets", 0)
    assert _queries_without_a_commit(tmp_path, before) == {"b"}
