"""From a `SerdeSpec` to the `Codec` of its format, and the reader schema pinned before planning.

This module sits above the codecs (`plain`, `json_codec`, `avro_codec`) and the schema registry client: the spec is
plain data and the codecs know nothing of each other, so no serde module imports one above it.
"""

from __future__ import annotations

import dataclasses

from ethereal_kafka.errors import ConfigError
from ethereal_kafka.serde.base import Codec
from ethereal_kafka.serde.json_codec import JsonCodec
from ethereal_kafka.serde.plain import BytesCodec, StringCodec
from ethereal_kafka.serde.spec import SerdeSpec, read_schema_file


def build_codec(spec: SerdeSpec) -> Codec:
    """Return the codec `spec` describes. Called on executors (once per task, or cached per worker) and on the
    driver (to learn a format's Arrow type).

    Raises:
        ConfigError: the spec is incomplete or its schema does not parse.
        RegistryError: avro with a registry, no pinned schema, and the registry cannot be reached.
    """
    spec.check()
    if spec.format == "bytes":
        return BytesCodec(spec)
    if spec.format == "string":
        return StringCodec(spec)
    if spec.format == "json":
        return JsonCodec(spec)
    # Imported here, not above: the Avro codec brings the schema registry client (~0.2 CPU-s to import), which a
    # process that reads and writes only JSON or plain fields never needs. Not an import cycle: `avro_codec`
    # imports nothing from this module.
    from ethereal_kafka.serde.avro_codec import AvroCodec

    return AvroCodec(pin_schema(spec))


def pin_schema(spec: SerdeSpec) -> SerdeSpec:
    """`spec` with its reader schema pinned into `schema_text`, so every executor decodes with the same schema.

    Called on the driver before planning. Avro with a registry and no schema file fetches the latest schema of
    `subject`; a schema file is read; other formats (and a spec already pinned) are returned unchanged.

    Raises:
        ConfigError: avro with a registry but neither schema file nor subject, or an unreadable schema file.
        RegistryError: the registry is unreachable or has no such subject.
    """
    if spec.format != "avro" or spec.schema_text is not None:
        return spec
    if spec.schema_file is not None:
        return dataclasses.replace(spec, schema_text=read_schema_file(spec.field, spec.schema_file))
    if spec.subject is None:
        raise ConfigError(
            f"{spec.field}.format=avro with a registry and no {spec.field}.schema.file reads with the latest "
            "schema of the subject {topic}-" + spec.field + ": name exactly one topic or give a schema file"
        )
    # Imported here for the same reason as the Avro codec above (and it imports nothing from this module).
    from ethereal_kafka.serde.registry import registry_client

    _, text = registry_client(spec).latest(spec.subject)
    return dataclasses.replace(spec, schema_text=text)
