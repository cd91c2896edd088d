"""Errors raised by the record-batch codec.

The tree (catch `CodecError` to catch everything the codec raises about its input)::

    CodecError                        root of seglog.records errors
    ├── CorruptRecordError            malformed bytes: bad length, bad varint, trailing bytes,
    │   │                             count mismatch, truncated batch or record, bad magic
    │   └── InvalidCrcError           the stored CRC-32C does not match the computed one
    ├── DecompressionLimitError       records that decompress past the output cap (a bomb)
    └── UnsupportedCompressionError   a compression codec id outside 0..4

Every message names what was expected and what was found, and where (batch position and
base offset) when the codec knows it.  Misuse of the API by the caller (a str value, a
negative timestamp) raises the built-in TypeError / ValueError instead: those are bugs in
the calling code, not bad data.
"""

from __future__ import annotations

__all__ = [
    "CodecError",
    "CorruptRecordError",
    "DecompressionLimitError",
    "InvalidCrcError",
    "UnsupportedCompressionError",
]


class CodecError(Exception):
    """Root of the errors the record codec raises about the bytes it is given."""


class CorruptRecordError(CodecError):
    """The bytes are not a well-formed Kafka v2 record batch (Kafka's CorruptRecordException
    and InvalidRecordException, which the codec does not tell apart)."""


class InvalidCrcError(CorruptRecordError):
    """A batch's stored CRC-32C differs from the CRC-32C of its attributes..end bytes."""


class DecompressionLimitError(CodecError):
    """A compressed records area expands past the caller's output cap (decompressed_bytes_max):
    refused before the output is allocated, as a possible decompression bomb."""


class UnsupportedCompressionError(CodecError):
    """A compression codec id the codec does not know (Kafka defines 0..4)."""
