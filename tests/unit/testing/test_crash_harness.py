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


def test_session_cpu_counts_the_live_processes_of_a_session_by_kind() -> None:
    """This process's own session: its CPU is counted (a lower bound: nothing negative, nothing from elsewhere),
    under its kind; the line lists kinds from the largest."""
    import subprocess
    import sys

    from ethereal_kafka.testing.crash import describe_cpu, session_cpu

    # A child in a session of its own that burns a little CPU, then waits to be read.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass\n"
            "print('ok', flush=True)\nsys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ok\n"
        cpu = session_cpu(child.pid)
    finally:
        child.kill()
        child.wait()
    assert sum(cpu.values()) >= 0.25, cpu
    assert set(cpu) == {"python"}, "one kind: a python process without -m"
    assert describe_cpu({"jvm": 2.0, "python": 3.5}) == "CPU 5.5 s (python 3.5, jvm 2.0)"
