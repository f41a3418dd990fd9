"""The crash harness: "recovery is over" once every query of the run committed an epoch; a kill aimed at a step of one
query's transactions."""

from __future__ import annotations

from pathlib import Path

from ethereal_kafka.testing.crash import _log_files, _queries_without_a_commit, is_step


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


def test_a_kill_aimed_at_a_step_waits_for_that_querys_step() -> None:
    line = "1795640409.123 checked 7 1 open"
    assert is_step(line, "open", "checked")
    assert is_step(line, "open", None)  # any query
    assert not is_step(line, "open", "alerts")  # another query's transaction does not count
    assert not is_step(line, "commit", "checked")
    assert not is_step("garbage", "open", None)
