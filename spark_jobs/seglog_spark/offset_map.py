"""SkimpyOffsetMap: Kafka's fixed-memory map from a key's digest to its latest offset
(kafka-storage.md 6.4; Kafka's storage/.../log/SkimpyOffsetMap.java).

One byte buffer of `memory_bytes` holds open-addressing slots; each entry is the key's digest
followed by the offset::

    digest   hash_bytes (16 for MD5)   the key's digest; the key itself is never stored
    offset   int64, big-endian         the latest offset seen for the key

Probe `attempt` of a digest reads the 4 bytes starting at byte min(attempt, hash_bytes - 4) as a
big-endian int32, adds max(0, attempt - hash_bytes + 4) (linear probing once the digest's
windows are used up), and takes abs(value) % slots (Java's int arithmetic: the addition wraps
and abs(Integer.MIN_VALUE) is read as 0, Kafka's Utils.abs).  A slot is empty when all its
bytes are zero.  There are no deletes; two keys with equal digests are one key (the accepted
risk of storing digests instead of keys).  Memory never grows: the caller stops adding once
`size` reaches its load-factor bound (the cleaner's "map full").
"""

from __future__ import annotations

import hashlib
import struct

__all__ = ["DEFAULT_HASH_ALGORITHM", "SkimpyOffsetMap"]

DEFAULT_HASH_ALGORITHM = "md5"  # Kafka's default: 16 bytes, fast, collisions rare enough
_OFFSET = struct.Struct(">q")  # the offset after each digest, big-endian as Java writes it
_INT32_SIGN = 1 << 31
_INT32_MASK = (1 << 32) - 1
_PROBE_WINDOW_BYTES = 4  # each probe reads one int32 window of the digest


def _to_int32(value: int) -> int:
    value &= _INT32_MASK
    return value - (1 << 32) if value & _INT32_SIGN else value


class SkimpyOffsetMap:
    """A bounded map of key digest -> offset in one preallocated bytearray.

    `put`/`get` take keys (bytes); `put_digest`/`get_digest` take digests already computed
    (the Spark job hashes keys where it decodes them and ships digests to the shard that owns
    them).  `lookups` and `probes` count every put and get and every slot examined;
    `collision_rate` is (probes - lookups) / lookups, as Kafka reports it.
    """

    __slots__ = (
        "_buffer",
        "_hash",
        "hash_bytes",
        "entry_bytes",
        "slots",
        "size",
        "lookups",
        "probes",
        "latest_offset",
        "_empty_entry",
        "_max_attempts",
    )

    def __init__(self, memory_bytes: int, hash_algorithm: str = DEFAULT_HASH_ALGORITHM) -> None:
        self._hash = getattr(hashlib, hash_algorithm, None) or (lambda data: hashlib.new(hash_algorithm, data))
        self.hash_bytes = hashlib.new(hash_algorithm).digest_size
        if self.hash_bytes < _PROBE_WINDOW_BYTES:
            raise ValueError(f"the digest must be at least {_PROBE_WINDOW_BYTES} bytes, found {self.hash_bytes} ({hash_algorithm})")
        self.entry_bytes = self.hash_bytes + _OFFSET.size
        self.slots = memory_bytes // self.entry_bytes
        if self.slots < 1:
            raise ValueError(f"memory_bytes must hold at least one {self.entry_bytes}-byte entry, found {memory_bytes}")
        self._buffer = bytearray(self.slots * self.entry_bytes)
        self._empty_entry = bytes(self.entry_bytes)
        self._max_attempts = self.slots + self.hash_bytes - _PROBE_WINDOW_BYTES
        self.size = 0
        self.lookups = 0
        self.probes = 0
        self.latest_offset = -1

    # -- Kafka's OffsetMap interface -------------------------------------------------------

    def digest(self, key: bytes) -> bytes:
        return self._hash(key).digest()

    def put(self, key: bytes, offset: int) -> None:
        self.put_digest(self._hash(key).digest(), offset)

    def get(self, key: bytes) -> int:
        """The offset stored for `key`, or -1."""
        return self.get_digest(self._hash(key).digest())

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        """Zero the buffer and forget every entry and counter, as Kafka's clear()."""
        self._buffer[:] = bytes(len(self._buffer))
        self.size = self.lookups = self.probes = 0
        self.latest_offset = -1

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @property
    def collision_rate(self) -> float:
        return (self.probes - self.lookups) / self.lookups if self.lookups else 0.0

    @property
    def memory_bytes(self) -> int:
        return len(self._buffer)

    # -- probing ---------------------------------------------------------------------------

    def _position_of(self, digest: bytes, attempt: int) -> int:
        start = min(attempt, self.hash_bytes - _PROBE_WINDOW_BYTES)
        probe = int.from_bytes(digest[start : start + _PROBE_WINDOW_BYTES], "big", signed=True)
        probe = _to_int32(probe + max(0, attempt - self.hash_bytes + _PROBE_WINDOW_BYTES))
        self.probes += 1
        return (abs(probe) if probe != -_INT32_SIGN else 0) % self.slots * self.entry_bytes

    def offset_at(self, position: int) -> int:
        """The offset stored in the entry at byte `position` (as put_digest returned it):
        entries never move, so a caller that kept the position reads the key's latest offset
        without probing again."""
        return _OFFSET.unpack_from(self._buffer, position + self.hash_bytes)[0]

    def put_digest(self, digest: bytes, offset: int) -> int:
        """Store `offset` for `digest`, replacing an equal digest's offset; returns the byte
        position of the entry."""
        if len(digest) != self.hash_bytes:
            raise ValueError(f"a digest must be {self.hash_bytes} bytes, found {len(digest)}")
        if self.size >= self.slots:
            raise ValueError(f"attempt to add a new entry to a full offset map ({self.size} of {self.slots} slots)")
        self.lookups += 1
        buffer, hash_bytes, empty = self._buffer, self.hash_bytes, self._empty_entry
        entry_bytes = self.entry_bytes
        # Attempt 0, inlined: at the load factors the cleaner runs at it nearly always decides.
        self.probes += 1
        position = (abs(int.from_bytes(digest[:4], "big", signed=True)) % self.slots) * entry_bytes
        if digest[:4] == b"\x80\x00\x00\x00":  # abs(Integer.MIN_VALUE) reads as 0 (Utils.abs)
            position = 0
        attempt = 0
        while buffer[position : position + entry_bytes] != empty:
            if buffer[position : position + hash_bytes] == digest:
                _OFFSET.pack_into(buffer, position + hash_bytes, offset)
                self.latest_offset = offset
                return position
            attempt += 1
            if attempt >= self._max_attempts:
                raise ValueError(f"attempt to add a new entry to a full offset map ({self.size} of {self.slots} slots)")
            position = self._position_of(digest, attempt)
        buffer[position : position + hash_bytes] = digest
        _OFFSET.pack_into(buffer, position + hash_bytes, offset)
        self.latest_offset = offset
        self.size += 1
        return position

    def get_digest(self, digest: bytes) -> int:
        """The offset stored for `digest`, or -1 (an empty slot met, or every attempt made)."""
        self.lookups += 1
        buffer, hash_bytes, empty = self._buffer, self.hash_bytes, self._empty_entry
        entry_bytes = self.entry_bytes
        self.probes += 1
        position = (abs(int.from_bytes(digest[:4], "big", signed=True)) % self.slots) * entry_bytes
        if digest[:4] == b"\x80\x00\x00\x00":
            position = 0
        attempt = 0
        while True:
            if buffer[position : position + entry_bytes] == empty:
                return -1
            if buffer[position : position + hash_bytes] == digest:
                return _OFFSET.unpack_from(buffer, position + hash_bytes)[0]
            attempt += 1
            if attempt >= self._max_attempts:
                return -1
            position = self._position_of(digest, attempt)
