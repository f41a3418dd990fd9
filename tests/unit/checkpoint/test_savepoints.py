"""Savepoint folders on disk (`checkpoint.savepoints`): sealed whole or not listed, damage detected, offsets merged."""

from __future__ import annotations

from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.savepoints import (
    Manifest,
    OperatorState,
    QueryPosition,
    SavepointError,
    begin,
    file_digests,
    list_savepoints,
    operator_folder,
    read_manifest,
    seal,
)


def _manifest(scratch: Path, savepoint_id: str, *queries: QueryPosition) -> Manifest:
    folder = operator_folder("totals/v1")
    (scratch / folder).mkdir(parents=True)
    (scratch / folder / "part-0.parquet").write_bytes(b"rows")
    (scratch / folder / "_SUCCESS").write_bytes(b"")
    state = OperatorState("totals/v1", "rolling", "out", 0, {"_ek_acc": "ValueState"}, folder, 1)
    state = OperatorState(**{**state.__dict__, "files": file_digests(scratch, folder)})
    return Manifest(savepoint_id, "shop", 1, "/jobs/shop.properties", queries, (state,))


def test_a_sealed_savepoint_reads_back_whole_and_an_unfinished_one_is_never_listed(tmp_path: Path) -> None:
    location = tmp_path / "savepoints"
    unfinished = begin(location, "a")
    _manifest(unfinished, "a")  # killed before `seal`: no manifest, a scratch name
    scratch = begin(location, "b")
    assert not unfinished.exists(), "the next savepoint removes a leftover scratch folder"
    position = QueryPosition("out", "ckpt-1", 4, None, [["orders", 0, 10], ["orders", 1, 7]])
    manifest = _manifest(scratch, "b", position)
    sealed = seal(scratch, manifest)
    assert sealed.name == "sp-b" and not scratch.exists()
    assert operator_folder("totals/v1") == "operators/totals%2Fv1"
    read = read_manifest(sealed)
    assert read.complete and read.operators == manifest.operators and read.queries == (position,)
    assert list(read.operators[0].files) == ["operators/totals%2Fv1/part-0.parquet"]
    assert [(p.name, type(m).__name__) for p, m in list_savepoints(location)] == [("sp-b", "Manifest")]
    assert read.agreed_offsets() == ([("orders", 0, 10), ("orders", 1, 7)], {})


def test_a_damaged_or_foreign_savepoint_is_refused_in_one_line(tmp_path: Path) -> None:
    scratch = begin(tmp_path, "c")
    sealed = seal(scratch, _manifest(scratch, "c"))
    (sealed / "operators/totals%2Fv1/part-0.parquet").write_bytes(b"rowz")
    with pytest.raises(SavepointError, match=r"part-0\.parquet of operator totals/v1 is missing or damaged"):
        read_manifest(sealed)
    (sealed / "_manifest.json").write_text('{"format": "flink-savepoint", "version": 1}')
    with pytest.raises(SavepointError, match="not an ethereal-kafka savepoint of version 1"):
        read_manifest(sealed)
    with pytest.raises(SavepointError, match="not a savepoint"):
        read_manifest(tmp_path / "nothing")


def test_queries_that_read_a_partition_to_different_offsets_each_keep_their_own(tmp_path: Path) -> None:
    """A restore starts each query where it stood; the partitions the queries agree on have one offset."""
    a = QueryPosition("a", "x", 1, None, [["orders", 0, 10]])
    b = QueryPosition("b", "y", 3, None, [["orders", 0, 12]])
    c = QueryPosition("c", "z", 2, None, [["orders", 1, 5]])
    manifest = Manifest("d", "shop", 1, "job", (a, b, c), ())
    assert manifest.agreed_offsets() == (
        [("orders", 1, 5)],
        {"a": [("orders", 0, 10)], "b": [("orders", 0, 12)], "c": [("orders", 1, 5)]},
    )
    assert Manifest("e", "shop", 1, "job", (a, c), ()).agreed_offsets() == (
        [("orders", 0, 10), ("orders", 1, 5)],
        {},
    )


def test_a_restores_source_holds_stay_until_its_query_commits_and_go_at_the_next_start(
    tmp_path: Path,
) -> None:
    """`runtime.savepoint.held_sources`: a hold left by a restore whose first epoch never committed stays (the
    replayed epoch 0 reads nothing again); once the query committed, the next start removes it."""
    from types import SimpleNamespace

    from ethereal_kafka.runtime.savepoint import held_sources

    held = tmp_path / "sources" / "ethereal-kafka" / "hold-events@shop"
    held.parent.mkdir(parents=True)
    held.touch()
    source = SimpleNamespace(checkpoint_location=str(tmp_path / "sources"), name="events", group="shop")
    build = SimpleNamespace(name="out", sources=(source,))
    job = SimpleNamespace(query_checkpoint=lambda q: str(tmp_path / q))
    assert held_sources([build], job) == {"out": [held]}  # type: ignore[list-item, arg-type]
    (tmp_path / "out" / "commits").mkdir(parents=True)
    (tmp_path / "out" / "commits" / "0").write_text("v1\n{}")
    assert held_sources([build], job) == {} and not held.exists()  # type: ignore[list-item, arg-type]
