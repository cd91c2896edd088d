"""Snappy in xerial's block framing, the form Kafka's Java producer writes.

Kafka compresses snappy batches with snappy-java's SnappyOutputStream, which frames raw
snappy blocks as::

    header   16 bytes   XERIAL_HEADER: magic, version, minimum compatible version
    block    repeated   int32 big-endian compressed length, then one raw snappy block
                        holding at most XERIAL_BLOCK_BYTES of uncompressed input

Readers (snappy-java's SnappyInputStream, kafka-python) take input that does not start with
the magic as one raw snappy block, so unframe() accepts both forms.
"""

from __future__ import annotations

import struct

import cramjam

XERIAL_HEADER = struct.Struct(
    ">"
    "8s"  # magic: 0x82 "SNAPPY" 0x00 (0x82 cannot start a raw snappy stream of this shape)
    "i"  # version of the framing: 1
    "i"  # oldest reader version that can read it: 1
)
XERIAL_BLOCK_LENGTH = struct.Struct(
    ">"
    "i"  # compressed length of the block that follows
)
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_MIN_COMPATIBLE_VERSION = 1
# snappy-java's default block size (SnappyOutputStream.DEFAULT_BLOCK_SIZE), which is what
# Kafka's producer uses: the uncompressed bytes fed to each raw snappy block.
XERIAL_BLOCK_BYTES = 32 * 1024

_HEADER_BYTES = XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_MIN_COMPATIBLE_VERSION)
assert len(XERIAL_MAGIC) == 8 and XERIAL_HEADER.size == 16


def frame(data) -> bytes:
    """Snappy-compress `data` in xerial framing."""
    view = memoryview(data)
    parts = [_HEADER_BYTES]
    for start in range(0, len(view), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(XERIAL_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def is_framed(data) -> bool:
    """Whether `data` starts with the xerial header's magic (the test readers apply)."""
    return len(data) >= XERIAL_HEADER.size and bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC


def _raw(block, output_bytes_max: int, too_large, cap: int) -> bytes:
    """One raw snappy block, its stated uncompressed length (the leading varint of the raw
    format) checked against ``output_bytes_max`` before anything is allocated."""
    stated = 0
    for shift, byte in zip(range(0, 35, 7), bytes(block[:5])):
        stated |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
    if stated > output_bytes_max:
        raise too_large("snappy", cap)
    return bytes(cramjam.snappy.decompress_raw(block))


def unframe(data, output_bytes_max: int | None = None, too_large=None) -> bytes:
    """Uncompress xerial-framed snappy, or a raw snappy block, at most ``output_bytes_max``
    bytes (``too_large(name, cap)`` is raised past it).  Raises ValueError (framing) or
    cramjam's error (block contents) on malformed input."""
    cap = (1 << 62) if output_bytes_max is None else output_bytes_max
    view = memoryview(data)
    if not is_framed(view):
        return _raw(view, cap, too_large, cap)
    # The version fields are not checked: only version 1 exists, and some producers
    # (redpanda) are known to write them little-endian.
    parts = []
    produced = 0
    position = XERIAL_HEADER.size
    while position < len(view):
        if position + XERIAL_BLOCK_LENGTH.size > len(view):
            raise ValueError(
                f"truncated xerial block length at byte {position}: expected "
                f"{XERIAL_BLOCK_LENGTH.size} bytes, found {len(view) - position}"
            )
        (block_bytes,) = XERIAL_BLOCK_LENGTH.unpack_from(view, position)
        position += XERIAL_BLOCK_LENGTH.size
        if block_bytes < 0 or position + block_bytes > len(view):
            raise ValueError(
                f"bad xerial block length at byte {position - XERIAL_BLOCK_LENGTH.size}: expected "
                f"0..{len(view) - position}, found {block_bytes}"
            )
        block = _raw(view[position : position + block_bytes], cap - produced, too_large, cap)
        produced += len(block)
        parts.append(block)
        position += block_bytes
    return b"".join(parts)
