"""What every peer of bench/peers.py computes, and the command line they share.

Each peer runs in an interpreter of its own (Quix Streams in its own virtualenv), so this module imports nothing
beyond the standard library.
"""

from __future__ import annotations

import argparse
from typing import Any

#: `--workload map` multiplies each bid's price by this; `passthrough` decodes and encodes the bid unchanged.
PRICE_FACTOR = 0.908
WORKLOADS = ("map", "passthrough")
GUARANTEES = ("exactly-once", "at-least-once")


def map_bid(bid: dict[str, Any]) -> dict[str, Any]:
    """The map workload on a decoded bid (in place): `price * PRICE_FACTOR`, every other field unchanged."""
    bid["price"] = bid["price"] * PRICE_FACTOR
    return bid


def peer_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with the arguments every peer takes: `--bootstrap`, `--input`, `--output`, `--workload`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--input", required=True, help="the input topic (JSON bids)")
    parser.add_argument("--output", required=True, help="the output topic")
    parser.add_argument("--workload", choices=WORKLOADS, default="map")
    return parser
