"""Issue 24 on the real broker: what a Flink engineer porting Flink's fraud-detection walkthrough runs into.

Item 1: a process function or a map without `output_type` whose elements have other fields than its input fails
the epoch with one line naming the operator, the field and the record's topic, partition and offset; nothing of the
epoch is committed (exit 0 with nulls before).
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from ethereal_kafka.testing.cluster import KafkaCluster
from ethereal_kafka.testing.plugin import RunJob, TopicFactory
from tests.integration.api_helpers import base_ts, feed_events, read_json, write_api_job
from tests.integration.walkthrough_jobs import LARGE, TRANSACTION_DDL

SINK = "value.format=json\nkey.format=string\n"


def _plain_transactions(count: int, seed: int, start: int) -> list[tuple[int, int, dict[str, Any]]]:
    """`(partition, offset, value)` of `count` transactions over 5 accounts and 2 partitions, ~1 s apart."""
    rng = random.Random(seed)
    offsets = [0, 0]
    out = []
    for i in range(count):
        partition = rng.randint(0, 1)
        amount = round(rng.choice([rng.uniform(0.01, 0.99), rng.uniform(2, 400), rng.uniform(501, 900)]), 2)
        value = {"account_id": rng.randint(1, 5), "amount": amount, "ts": start + i * 1_000}
        out.append((partition, offsets[partition], value))
        offsets[partition] += 1
    return out


@pytest.mark.parametrize(
    ("pipeline", "operator", "field"),
    [("process_without_output_type", "process#", "alert_ts"), ("map_without_output_type", "map#", "cents")],
)
def test_a_forgotten_output_type_fails_the_epoch_naming_operator_field_and_record(
    pipeline: str,
    operator: str,
    field: str,
    kafka_cluster: KafkaCluster,
    topic_factory: TopicFactory,
    tmp_path: Path,
    run_job: RunJob,
) -> None:
    bs = kafka_cluster.bootstrap
    source, alerts = topic_factory(partitions=2), topic_factory(partitions=2)
    txs = _plain_transactions(60, seed=24, start=base_ts())
    feed_events(bs, source, [(p, str(v["account_id"]), v, v["ts"]) for p, _, v in txs])
    job = write_api_job(
        tmp_path,
        bs,
        f"tests.integration.walkthrough_jobs:{pipeline}",
        {"transactions": (source, f"value.format=json\nvalue.schema={TRANSACTION_DDL}\n")},
        {"alerts": (alerts, SINK)},
        max_records=1_000,
    )
    result = run_job(job.path, check=False)
    written = read_json(bs, alerts)
    assert not result.ok, f"exit 0; {len(written)} records written, e.g. {written[:3]}"
    message = str(result.error)
    print(message)
    assert "\n" not in message
    assert operator in message and f"'{field}'" in message, message
    found = re.search(rf"topic {re.escape(source)} partition (\d+) offset (\d+)", message)
    assert found is not None, message
    # The named record is one whose element the operator could not store (the reference: every large transaction
    # for the process function, every transaction for the map).
    wrong = {(p, o) for p, o, v in txs if pipeline.startswith("map") or v["amount"] > LARGE}
    assert (int(found.group(1)), int(found.group(2))) in wrong, message
    assert written == [], "nothing of the failed epoch is committed"
