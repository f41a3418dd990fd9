"""How much one epoch of a source may read as the job runs, and whether its transactions can hold that much.

`runner.run_sources` applies `bounded_source` to every source it starts; `preflight` checks the same bounds against
`transaction.timeout.ms` before Spark starts (`bound_problems`), so `validate` and `run` refuse a job whose epochs
could outlive their transactions in a second, not after Spark's start-up. The checkpoint coordinator checks them
again at start, next to the broker's `transaction.max.timeout.ms`, which needs a connection.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ethereal_kafka.config.connectors import KafkaSourceConfig
from ethereal_kafka.config.job import Guarantee, JobConfig, LoadedJob
from ethereal_kafka.connectors.kafka.epoch_bounds import check_bounds_fit, default_bounds
from ethereal_kafka.errors import ConfigError
from ethereal_kafka.runtime.admission import sized_source


def bounded_source(job: JobConfig, source: KafkaSourceConfig) -> dict[str, object]:
    """The changes (fields of `KafkaSourceConfig`) that bound `source`'s epochs in `job`: under exactly-once a
    bound left at 0 gets `epoch_bounds.default_bounds` for the job's sizing mode (none of records when adaptive),
    and dead letters commit with their epoch; then the sizing mode's changes (`admission.sized_source`), within
    those bounds."""
    changes: dict[str, object] = {}
    if job.delivery_guarantee == Guarantee.EXACTLY_ONCE:
        max_records, max_bytes = default_bounds(
            job.transaction_timeout_ms, job.trigger_interval_ms, adaptive=job.epoch_sizing == "adaptive"
        )
        if source.max_records_per_epoch == 0 and max_records:
            changes["max_records_per_epoch"] = max_records
        if source.max_bytes_per_epoch == 0:
            changes["max_bytes_per_epoch"] = max_bytes
        changes["dlq_delivery"] = "epoch"  # dead letters commit with their epoch (`eos.dead_letters`)
    changes.update(sized_source(job, dataclasses.replace(source, **changes)))  # type: ignore[arg-type]
    return changes


def bound_problems(loaded: LoadedJob) -> list[str]:
    """Under exactly-once, one line per source whose epochs (as `bounded_source` bounds them) could take longer
    to commit than `transaction.timeout.ms` allows, naming the source's file; also a timeout shorter than the
    trigger interval (named in the job file). Empty otherwise. No I/O beyond the measured record size a source's
    checkpoint may hold."""
    job = loaded.job
    if job.delivery_guarantee != Guarantee.EXACTLY_ONCE:
        return []
    if job.transaction_timeout_ms < job.trigger_interval_ms:
        return [
            f"{loaded.path}: transaction.timeout.ms={job.transaction_timeout_ms} is shorter than "
            f"trigger.interval.ms={job.trigger_interval_ms}"
        ]
    problems = []
    for name, source in loaded.sources.items():
        as_run = dataclasses.replace(
            source,
            checkpoint_location=f"{job.checkpoint_location}/sources",
            **bounded_source(job, source),  # type: ignore[arg-type]
        )
        try:
            check_bounds_fit([as_run], job.transaction_timeout_ms, job.trigger_interval_ms)
        except ConfigError as exc:
            problems.append(f"{Path(loaded.file_of(name))}: {exc}")
    return problems
