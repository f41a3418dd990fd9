"""The `bytes` and `string` formats: no schema, the raw bytes or their UTF-8 text."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from ethereal_kafka.serde.base import Codec, DecodeResult, decode_rows


class BytesCodec(Codec):
    """`format=bytes`: values are the raw bytes, unchanged. Never fails to decode."""

    def arrow_type(self) -> pa.DataType:
        """`binary`."""
        return pa.binary()

    def decode(
        self, raw: pa.Array, topics: Sequence[str], partitions: Sequence[int], offsets: Sequence[int]
    ) -> DecodeResult:
        """Return `raw` as a binary array, with no errors."""
        return DecodeResult(raw.cast(pa.binary()), {})

    def encode(self, values: pa.Array, topic: str) -> list[bytes | None]:
        """Binary values pass through; string values are encoded as UTF-8.

        Raises:
            SerdeError: the column is neither binary nor string (row 0 is named).
        """
        return _passthrough(self, values, topic)


class StringCodec(Codec):
    """`format=string`: values are UTF-8 text. Invalid UTF-8 is an error of its row."""

    def arrow_type(self) -> pa.DataType:
        """`string`."""
        return pa.string()

    def decode(
        self, raw: pa.Array, topics: Sequence[str], partitions: Sequence[int], offsets: Sequence[int]
    ) -> DecodeResult:
        """Decode UTF-8; a cast validates the whole batch at once and only a failure is looked at row by row."""
        try:
            return DecodeResult(raw.cast(pa.string()), {})
        except pa.ArrowInvalid:
            return decode_rows(
                self, raw, topics, partitions, offsets, lambda data, _row: data.decode("utf-8")
            )

    def encode(self, values: pa.Array, topic: str) -> list[bytes | None]:
        """String values are encoded as UTF-8; binary values pass through.

        Raises:
            SerdeError: the column is neither string nor binary (row 0 is named).
        """
        return _passthrough(self, values, topic)


def _passthrough(codec: Codec, values: pa.Array, topic: str) -> list[bytes | None]:
    t = values.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return list(values.to_pylist())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [None if v is None else v.encode("utf-8") for v in values.to_pylist()]
    error = TypeError(f"{codec.spec.format} format encodes string or binary columns, not {t}")
    raise codec._encode_error(
        str(error), 0, topic, values[0].as_py() if len(values) else None, error
    ) from error
