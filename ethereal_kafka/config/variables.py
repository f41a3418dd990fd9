"""The environment a job was loaded with: which variables its files read, and that environment again, later.

A job's files take values from the environment (`bootstrap.servers=${KAFKA_BOOTSTRAP:-127.0.0.1:9092}`). A
command that looks at an app afterwards (`ethereal-kafka offsets APP`, `replay APP`) runs in another shell, where
those variables may be unset or different: `ethereal-kafka run` keeps the values its job read in the app's run
record (`job_variables`), and those commands load the job file again with them (`recorded_environment`).

A variable read by a secret key (`model.is_secret`: passwords, `sasl.*`, keys of `ssl.*`, tokens, or a setting
declared secret) is never kept: the command that loads the job again takes it from its own environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from ethereal_kafka.config.job import JobConfig, LoadedJob
from ethereal_kafka.config.model import Model, is_secret
from ethereal_kafka.config.properties import referenced_variables


def job_variables(loaded: LoadedJob, env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """Every environment variable the job file and its connector files read, with its value in `env` (default:
    this process's environment; None when unset, so the file's default applied), except the variables any secret
    key reads. Called by the runner when it writes the run record (`checkpoint.apps.record_run`)."""
    values = os.environ if env is None else env
    names: list[str] = []
    secret: set[str] = set()
    for path, model in _files(loaded):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue  # loaded a moment ago: a file gone since has nothing to record
        for key, read in referenced_variables(text, str(path)).items():
            if _secret_key(model, key):
                secret.update(read)
            else:
                names.extend(n for n in read if n not in names)
    return {name: values.get(name) for name in names if name not in secret}


def recorded_environment(
    recorded: Mapping[str, str | None], env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`env` (default: this process's environment) with the recorded variables as they were: set to their
    recorded value, or unset where the run had them unset. Variables the record does not name (secrets among them)
    keep their value in `env`."""
    out = dict(os.environ if env is None else env)
    for name, value in recorded.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def _files(loaded: LoadedJob) -> Iterator[tuple[Path, type[Model]]]:
    """The job file and each connector file, with the model that reads it."""
    yield loaded.path, JobConfig
    connectors: dict[str, Model] = {**loaded.sources, **loaded.sinks, **loaded.tables}
    for name, config in connectors.items():
        yield loaded.file_of(name), type(config)


def _secret_key(model: type[Model], key: str) -> bool:
    declared = model.settings().get(key)
    return is_secret(key) or bool(declared is not None and declared.metadata.get("secret"))
