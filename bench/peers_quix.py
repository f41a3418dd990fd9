"""The Quix Streams peer of bench/peers.py, and the virtualenv it runs in.

    ~/.cache/ethereal-kafka/bench/quix-venv/bin/python bench/peers_quix.py --bootstrap HOST:PORT \\
        --input IN --output OUT --group G --records N

Quix Streams is not a dependency of ethereal-kafka: bench/peers.py creates a virtualenv of its own for it
(`ensure_venv`, from bench/requirements-quix.txt, in the ethereal-kafka cache) and runs this file with that
interpreter. The application is what its documentation shows for a stateless topic→topic job: one process, the
JSON deserializer and serializer (orjson inside Quix), `apply` for the map (`--workload map`: `price * 0.908`;
`passthrough`: unchanged), `to_topic` with the input key. It stops after `--records` outputs (`run(count=...)`,
which commits the last checkpoint), or when no record came for `--idle-timeout` seconds.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

from peers_workload import GUARANTEES, map_bid, peer_parser

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements-quix.txt"


def ensure_venv(cache: Path) -> Path:
    """Return the Python interpreter of the bench's Quix Streams virtualenv under `cache`, creating it (with
    pip, from bench/requirements-quix.txt) on first use or when the requirements changed.

    Raises:
        subprocess.CalledProcessError: venv or pip failed.
    """
    folder = cache / "bench" / "quix-venv"
    python = folder / "bin" / "python"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    stamp = folder / f".installed-{digest}"
    if stamp.exists():
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True)
    stamp.touch()
    return python


def main() -> None:
    from quixstreams import Application

    parser = peer_parser(__doc__)
    parser.add_argument("--group", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--guarantee", choices=GUARANTEES, default="exactly-once")
    parser.add_argument("--commit-interval", type=float, default=1.0, help="seconds between commits")
    parser.add_argument("--idle-timeout", type=float, default=30.0)
    args = parser.parse_args()

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee=args.guarantee,
        commit_interval=args.commit_interval,
        state_dir=tempfile.mkdtemp(prefix="ek-peers-quix-state-"),
        loglevel="WARNING",
    )
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer="json")
    sink = app.topic(args.output, key_serializer="bytes", value_serializer="json")
    frame = app.dataframe(source)
    if args.workload == "map":
        frame = frame.apply(map_bid)
    frame.to_topic(sink)
    app.run(count=args.records, timeout=args.idle_timeout, collect=False)


if __name__ == "__main__":
    main()
