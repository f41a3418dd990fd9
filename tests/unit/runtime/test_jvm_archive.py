"""The class archives kept in the cache (`runtime.jvm`): pruning keeps the most recently used ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ethereal_kafka.runtime import jvm


def _archives(folder: Path, names: list[str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for age, name in enumerate(names):
        path = folder / name
        path.write_bytes(b"jsa")
        stamp = 1_000_000 + age  # the later in `names`, the newer
        os.utime(path, (stamp, stamp))
        made.append(path)
    return made


def test_an_archive_a_session_maps_survives_the_archives_built_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A developer's checkout built its archive first; three other virtualenvs (clean clones) build theirs later.
    Its archive is kept because its sessions used it since, not because it is new."""
    folder = tmp_path / "spark-cds"
    mine, *_ = _archives(folder, ["mine.jsa", "clone1.jsa", "clone2.jsa"])
    monkeypatch.delenv(jvm.ENV_SWITCH, raising=False)
    monkeypatch.delenv(jvm.OPTIONS_ENV, raising=False)
    monkeypatch.setattr(jvm, "archive_path", lambda: mine)

    conf = jvm.with_archive({})

    assert conf[jvm.OPTIONS_KEY] == f"-XX:SharedArchiveFile={mine}"
    newest = _archives(folder, ["clone3.jsa"])[0]
    os.utime(newest)  # built after the session above used `mine`
    jvm._prune(folder, keep=newest)
    assert sorted(p.name for p in folder.glob("*.jsa")) == ["clone2.jsa", "clone3.jsa", "mine.jsa"]


def test_pruning_without_use_removes_the_oldest(tmp_path: Path) -> None:
    folder = tmp_path / "spark-cds"
    _archives(folder, ["a.jsa", "b.jsa", "c.jsa", "d.jsa"])
    jvm._prune(folder, keep=folder / "d.jsa")
    assert sorted(p.name for p in folder.glob("*.jsa")) == ["b.jsa", "c.jsa", "d.jsa"]
