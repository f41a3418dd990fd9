"""`runtime.logs.child_output_to`: what a process started inside the block writes goes to the file; this
process's own output is back where it was afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ethereal_kafka.runtime.logs import child_output_to


def test_a_child_started_inside_writes_to_the_file_and_the_parents_output_is_restored(tmp_path: Path) -> None:
    target = tmp_path / "logs" / "jvm-output.log"
    before = os.fstat(2).st_ino, os.fstat(1).st_ino
    with child_output_to(target):
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"]
        )
    child.wait()  # the child keeps the file after the block: what a long-running JVM does
    assert (os.fstat(2).st_ino, os.fstat(1).st_ino) == before
    text = target.read_text()
    assert "to stdout" in text and "to stderr" in text
