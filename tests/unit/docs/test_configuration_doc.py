"""docs/configuration.md lists exactly the keys the configuration models accept, in each model's section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ethereal_kafka.config import JobConfig, KafkaSinkConfig, KafkaSourceConfig, Model
from ethereal_kafka.config.connectors import KafkaTableConfig

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"

SECTIONS: dict[str, type[Model]] = {
    "## Kafka source": KafkaSourceConfig,
    "## Kafka sink": KafkaSinkConfig,
    "## Global table": KafkaTableConfig,
    "## Job": JobConfig,
}


def documented_keys(heading: str) -> set[str]:
    """The keys in the first column of the tables under `heading` (up to the next `## ` heading)."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    keys: set[str] = set()
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("| `"):
            keys.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return keys


@pytest.mark.parametrize("heading", list(SECTIONS))
def test_every_accepted_key_is_documented_and_every_documented_key_accepted(heading: str) -> None:
    accepted = set(SECTIONS[heading].known_keys())
    documented = documented_keys(heading)
    assert not accepted - documented, (
        f"{heading}: accepted but not documented: {sorted(accepted - documented)}"
    )
    assert not documented - accepted, (
        f"{heading}: documented but not accepted: {sorted(documented - accepted)}"
    )
