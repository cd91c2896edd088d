"""A key shard's entries of one range as they pass between the Spark job's stages (job.py's
.keys files, job_store.py's .keys objects): bytes from outside the process, so each shard's
slice of a range's file is a block that says what it is and is checked whole before use.

A block: magic, then little-endian int64s version, range id, shard, entry count, and the range's
[base, end) offsets as the scan saw them; the entries (key_scan.ENTRY, 28 bytes each); then the
CRC-32C (little-endian uint32) of everything before it.  A shard with no entries in a range has
no block (its slice of the file is empty).
"""

from __future__ import annotations

import struct

import numpy as np

from seglog.records import crc32c

from .errors import CleanerError
from .key_scan import ENTRY, ENTRY_DTYPE

__all__ = ["KEYS_BLOCK_OVERHEAD", "KEYS_FILE_SIZE_MAX", "keys_block", "open_keys_block"]

_MAGIC = b"SGLKEYS\x00"
_VERSION = 1
_HEADER = struct.Struct("<8s6q")
_CRC = struct.Struct("<I")
KEYS_BLOCK_OVERHEAD = _HEADER.size + _CRC.size
# No range's block is larger: a range is at most a segment (int32 positions), and an entry is
# at least a record's bytes (a keyed v2 record takes at least 7), so a block above this is not
# one a scan wrote, whatever a caller's bounds say.
KEYS_FILE_SIZE_MAX = KEYS_BLOCK_OVERHEAD + (1 << 31) // 7 * ENTRY.size


def keys_block(range_id: int, shard: int, base_offset: int, end_offset: int, packed: bytes) -> bytes:
    """The block of `packed` (a shard's entries of range `range_id`), or b"" for none."""
    if not packed:
        return b""
    head = _HEADER.pack(_MAGIC, _VERSION, range_id, shard, len(packed) // ENTRY.size, base_offset, end_offset)
    return b"".join((head, packed, _CRC.pack(crc32c(packed, crc32c(head)))))


def open_keys_block(block: bytes, *, range_id: int, shard: int, size: int, record_count: int, source: str) -> bytes:
    """The entries of `block`, read back from `source` where the scan wrote `size` bytes for
    shard `shard` of range `range_id` (of `record_count` records); a block that is not exactly
    that (cut, grown, flipped, another range's or shard's, an entry outside the range's offsets
    or records, or out of order) is refused with a CleanerError naming the shard, range and
    source."""
    where = f"key shard {shard}: range {range_id}: {source}"
    count, rest = divmod(size - KEYS_BLOCK_OVERHEAD, ENTRY.size)
    if size > KEYS_FILE_SIZE_MAX or count < 0 or rest:
        raise CleanerError(f"{where}: the scan's bounds give {size} bytes, not a block of whole entries")
    if len(block) != size:
        raise CleanerError(f"{where}: {len(block)} bytes, the scan wrote a block of {size} "
                           f"(its {count} entries): the first stage's files changed under the job")
    magic, version, block_range, block_shard, block_count, base, end = _HEADER.unpack_from(block)
    if magic != _MAGIC or version != _VERSION:
        raise CleanerError(f"{where}: not a version {_VERSION} block of key entries (magic {magic!r}, version {version})")
    (crc,) = _CRC.unpack_from(block, size - _CRC.size)
    if crc != crc32c(memoryview(block)[: size - _CRC.size]):
        raise CleanerError(f"{where}: its CRC-32C does not match its bytes")
    if (block_range, block_shard, block_count) != (range_id, shard, count):
        raise CleanerError(f"{where}: a block of range {block_range}, shard {block_shard}, {block_count} entries, "
                           f"where the scan wrote range {range_id}, shard {shard}, {count} entries")
    body = block[_HEADER.size : size - _CRC.size]
    entries = np.frombuffer(body, dtype=ENTRY_DTYPE)
    offsets, ordinals = entries["offset"], entries["ordinal"]
    if count and not (base <= int(offsets[0]) and int(offsets[-1]) < end and np.all(offsets[1:] > offsets[:-1])):
        raise CleanerError(f"{where}: an entry's offset outside the range's [{base}, {end}) or out of order")
    if count and not (0 <= int(ordinals[0]) and int(ordinals[-1]) < record_count and np.all(ordinals[1:] > ordinals[:-1])):
        raise CleanerError(f"{where}: an entry's ordinal outside the range's {record_count} records or out of order")
    return body
