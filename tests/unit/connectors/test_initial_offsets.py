"""The source pins a query's initial offsets (`KafkaStreamReader.initialOffset`): Spark does not log a Python
source's initial offset, so a query whose first epoch did not commit asks again, and with
`starting.offsets=latest` the second answer would be later than the first (the records between lost)."""

from __future__ import annotations

from pathlib import Path

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.connectors.kafka.decoding import SourceLayout
from ethereal_kafka.connectors.kafka.source import KafkaStreamReader, pinned_initial_offsets


class _Resolver:
    """Answers "the end of the topic now", which moves on between the two asks."""

    def __init__(self) -> None:
        self.end = 100

    def initial(self) -> dict[tuple[str, int], int]:
        return {("t", 0): self.end, ("t", 1): self.end}


def test_the_first_answer_is_pinned_and_given_again_after_a_restart(tmp_path: Path) -> None:
    config = KafkaSourceConfig.from_properties(
        {
            "name": "events",
            "bootstrap.servers": "127.0.0.1:1",
            "topics": "t",
            "starting.offsets": "latest",
            "checkpoint.location": str(tmp_path / "sources"),
        },
        source="test",
    )
    first, resolver = KafkaStreamReader(SourceLayout.from_config(config)), _Resolver()
    first._resolver = resolver  # type: ignore[assignment]
    assert first.initialOffset() == {"t": {"0": 100, "1": 100}}
    resolver.end = 250  # records arrived; the first epoch [100, ...) never committed
    again = KafkaStreamReader(SourceLayout.from_config(config))  # a restart: reader memory is lost
    again._resolver = resolver  # type: ignore[assignment]
    assert again.initialOffset() == {"t": {"0": 100, "1": 100}}, "the pinned start, not the end as it is now"
    pinned = pinned_initial_offsets(config)
    assert pinned is not None and pinned.to_json() == {"t": {"0": 100, "1": 100}}
