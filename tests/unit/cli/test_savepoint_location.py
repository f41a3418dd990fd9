"""`cli.savepoint_cmd.location`: `--into`, else the job's `savepoint.location`, else beside the checkpoint; never
inside the checkpoint folder, which a restore moves aside."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ethereal_kafka.checkpoint.savepoints import SavepointError
from ethereal_kafka.cli.app_job import resolve_app
from ethereal_kafka.cli.savepoint_cmd import location


def _app(tmp_path: Path, extra: str = "") -> argparse.Namespace:
    (tmp_path / "in.properties").write_text(
        "connector.class=kafka-source\nbootstrap.servers=127.0.0.1:9\ntopics=a\nname=in\n"
    )
    (tmp_path / "out.properties").write_text(
        "connector.class=kafka-sink\nbootstrap.servers=127.0.0.1:9\ntopic=b\nname=out\n"
    )
    job = tmp_path / "job.properties"
    job.write_text(
        f"app.id=sp-location\nsources=in.properties\nsinks=out.properties\npipeline=m:f\n"
        f"checkpoint.location={tmp_path / 'cp'}\n{extra}"
    )
    return argparse.Namespace(app=None, job=str(job))


def test_the_savepoint_folder_is_chosen_and_kept_out_of_the_checkpoint(tmp_path: Path) -> None:
    app = resolve_app(_app(tmp_path))
    assert location(app, None) == tmp_path / "cp.savepoints"
    assert location(app, str(tmp_path / "here")) == tmp_path / "here"
    chosen = resolve_app(_app(tmp_path, f"savepoint.location={tmp_path / 'kept'}\n"))
    assert location(chosen, None) == tmp_path / "kept"
    inside = resolve_app(_app(tmp_path, f"savepoint.location={tmp_path / 'cp' / 'sp'}\n"))
    with pytest.raises(SavepointError, match="inside the checkpoint folder"):
        location(inside, None)
