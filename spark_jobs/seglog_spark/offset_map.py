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

`put_digests`/`get_digests` do the same as calling `put_digest`/`get_digest` once per digest,
in order, on arrays of digests at once (numpy): the same buffer bytes, size, counters and
results, so a cleaning's map, utilisation and collision rate are Kafka's whichever is used
(a Hypothesis test compares them).  See `put_digests` for how the probing is run in bulk.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np

__all__ = ["DEFAULT_HASH_ALGORITHM", "SkimpyOffsetMap", "unique_digests"]

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

    @staticmethod
    def slots_of(memory_bytes: int, hash_algorithm: str = DEFAULT_HASH_ALGORITHM) -> int:
        """The slots a map of `memory_bytes` has, without allocating it."""
        return memory_bytes // (hashlib.new(hash_algorithm).digest_size + _OFFSET.size)

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

    # -- in bulk (numpy) ---------------------------------------------------------------------

    def _table(self) -> np.ndarray:
        """The buffer as a writable (slots, entry_bytes) uint8 array (a view, no copy)."""
        return np.frombuffer(self._buffer, dtype=np.uint8).reshape(self.slots, self.entry_bytes)

    def _positions(self, flat_digests: np.ndarray, rows: np.ndarray, attempts: np.ndarray) -> np.ndarray:
        """The slot each digest row probes at its attempt (the formula of _position_of)."""
        hash_bytes = self.hash_bytes
        at = rows * hash_bytes + np.minimum(attempts, hash_bytes - _PROBE_WINDOW_BYTES)
        window = (
            (flat_digests[at].astype(np.int64) << 24)
            | (flat_digests[at + 1].astype(np.int64) << 16)
            | (flat_digests[at + 2].astype(np.int64) << 8)
            | flat_digests[at + 3].astype(np.int64)
        )
        window -= (window >= _INT32_SIGN) * (1 << 32)  # the window as a signed int32
        probe = window + np.maximum(0, attempts - hash_bytes + _PROBE_WINDOW_BYTES)
        probe = ((probe + _INT32_SIGN) & _INT32_MASK) - _INT32_SIGN  # Java's int addition wraps
        return np.where(probe == -_INT32_SIGN, 0, np.abs(probe)) % self.slots

    def _probe(self, digests: np.ndarray):
        """For each (distinct) digest row: (slot, attempt, state), state 1 when the slot holds
        the digest, 0 when it is the first empty slot of the digest's probe sequence, -1 when
        every attempt was made without meeting either; the slot examined last in each case."""
        count = len(digests)
        table, hash_bytes = self._table(), self.hash_bytes
        flat = digests.reshape(-1)
        slot = np.zeros(count, dtype=np.int64)
        attempt = np.zeros(count, dtype=np.int64)
        state = np.full(count, -1, dtype=np.int8)
        pending = np.arange(count)
        tries = np.zeros(count, dtype=np.int64)
        while pending.size:
            where = self._positions(flat, pending, tries)
            entries = table[where]
            empty = ~entries.any(axis=1)
            equal = ~empty & (entries[:, :hash_bytes] == digests[pending]).all(axis=1)
            done = empty | equal
            finished = pending[done]
            slot[finished] = where[done]
            attempt[finished] = tries[done]
            state[finished] = equal[done]
            tries = tries[~done] + 1
            pending = pending[~done]
            exhausted = tries >= self._max_attempts
            if exhausted.any():
                slot[pending[exhausted]] = -1
                attempt[pending[exhausted]] = self._max_attempts - 1
                tries, pending = tries[~exhausted], pending[~exhausted]
        return slot, attempt, state

    def put_digests(self, digests: np.ndarray, offsets: np.ndarray, limit: int | None = None):
        """put_digest(digests[i], offsets[i]) for i in order, stopping before the first i at
        which the map already holds `limit` entries (the cleaner's load-factor bound).

        Returns (consumed, positions): how many were put, and the byte position of each one's
        entry, as put_digest returns it.  `digests` is an (n, hash_bytes) uint8 array.
        A put that would find the map full raises ValueError, as put_digest does (in bulk,
        before anything of the call is stored).

        Bulk probing gives the sequential result: a digest already in the map is found by
        probing the current buffer; each new one takes, in first-put order, the first slot of
        its probe sequence that is empty and not taken by a new digest put earlier.  Rounds
        compute that: every new digest claims the first slot empty in the buffer from its
        current attempt; where several claim one slot the earliest keeps it and the others
        probe on.  A digest only moves on from a slot that an earlier one ends up holding, so
        the rounds stop at the sequential placement.  A digest's later puts probe the same
        slots as its first (entries never move), so each put costs its digest's attempts + 1.
        """
        digests = np.ascontiguousarray(digests, dtype=np.uint8).reshape(-1, self.hash_bytes)
        offsets = np.asarray(offsets, dtype=np.int64)
        count = len(offsets)
        if count == 0:
            return 0, np.zeros(0, dtype=np.int64)
        if not digests.any(axis=1).all():
            # An all-zero digest put at offset 0 leaves an entry that reads as empty, so the
            # next put of it counts as new again: Kafka's quirk, kept by putting one by one.
            return self._put_one_by_one(digests, offsets, limit)
        first, inverse = unique_digests(digests)
        distinct = digests[first]
        slot, attempt, state = self._probe(distinct)
        # Size before each put: the map's size plus the new digests first put before it.
        first_put_of_new = np.zeros(count, dtype=np.int64)
        first_put_of_new[first[state != 1]] = 1
        size_before = self.size + np.cumsum(first_put_of_new) - first_put_of_new
        consumed = count
        if limit is not None:
            stopped = np.flatnonzero(size_before >= limit)
            if stopped.size:
                consumed = int(stopped[0])
        if consumed == 0:
            return 0, np.zeros(0, dtype=np.int64)
        used = int(np.searchsorted(first, consumed))  # distinct digests first put before `consumed`
        slot, attempt, state = slot[:used], attempt[:used], state[:used]
        if (size_before[:consumed] >= self.slots).any() or (state == -1).any():
            raise ValueError(f"attempt to add a new entry to a full offset map ({self.size} of {self.slots} slots)")
        new = np.flatnonzero(state != 1)
        if new.size:
            slot[new], attempt[new] = self._place(distinct[:used], new, slot[new], attempt[new])
        inverse = inverse[:consumed]
        last_put = np.zeros(used, dtype=np.int64)
        np.maximum.at(last_put, inverse, np.arange(consumed))
        table = self._table()
        table[slot[new], : self.hash_bytes] = distinct[new]
        table[slot, self.hash_bytes :] = offsets[last_put].astype(">i8").view(np.uint8).reshape(-1, _OFFSET.size)
        self.size += int(new.size)
        self.lookups += consumed
        self.probes += int((attempt[inverse] + 1).sum())
        self.latest_offset = int(offsets[consumed - 1])
        return consumed, slot[inverse] * self.entry_bytes

    def _put_one_by_one(self, digests: np.ndarray, offsets: np.ndarray, limit: int | None):
        positions = []
        for digest, offset in zip(digests, offsets.tolist()):
            if limit is not None and self.size >= limit:
                break
            positions.append(self.put_digest(digest.tobytes(), offset))
        return len(positions), np.array(positions, dtype=np.int64)

    def _place(self, distinct: np.ndarray, new: np.ndarray, slot: np.ndarray, attempt: np.ndarray):
        """The sequential placement of the new digests distinct[new] (in put order); `slot`
        and `attempt`: each one's first empty slot in the buffer as it is before them.
        owner[s] is the earliest new digest claiming slot s so far; a claimant that is not
        the owner, or that an earlier one displaces, probes on."""
        table, flat = self._table(), distinct.reshape(-1)
        nobody = new.size
        owner = np.full(self.slots, nobody, dtype=np.int64)
        claimants = np.arange(new.size)
        np.minimum.at(owner, slot, claimants)
        moving = claimants[owner[slot] != claimants]
        while moving.size:
            tries = attempt[moving] + 1
            left = moving
            while left.size:  # each one probes on to the next slot empty in the buffer
                if (tries >= self._max_attempts).any():
                    raise ValueError(f"attempt to add a new entry to a full offset map ({self.size} of {self.slots} slots)")
                where = self._positions(flat, new[left], tries)
                empty = ~table[where].any(axis=1)
                slot[left[empty]], attempt[left[empty]] = where[empty], tries[empty]
                left, tries = left[~empty], tries[~empty] + 1
            previous = owner[slot[moving]]
            np.minimum.at(owner, slot[moving], moving)
            now = owner[slot[moving]]
            displaced = np.unique(previous[(previous != nobody) & (previous != now)])
            moving = np.concatenate((moving[now != moving], displaced))
        return slot, attempt

    def get_digests(self, digests: np.ndarray) -> np.ndarray:
        """get_digest(digest) for each row of the (n, hash_bytes) uint8 array `digests`: the
        offsets (-1 when absent); counters advance as n get_digest calls would."""
        digests = np.ascontiguousarray(digests, dtype=np.uint8).reshape(-1, self.hash_bytes)
        count = len(digests)
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        first, inverse = unique_digests(digests)
        slot, attempt, state = self._probe(digests[first])
        found = np.full(len(first), -1, dtype=np.int64)
        hit = state == 1
        if hit.any():
            found[hit] = self._table()[slot[hit], self.hash_bytes :].copy().view(">i8").reshape(-1)
        self.lookups += count
        self.probes += int((attempt[inverse] + 1).sum())
        return found[inverse]

    def offsets_at(self, positions: np.ndarray) -> np.ndarray:
        """offset_at for each byte position in `positions`."""
        rows = np.asarray(positions, dtype=np.int64) // self.entry_bytes
        return self._table()[rows, self.hash_bytes :].copy().view(">i8").reshape(-1).astype(np.int64)


def unique_digests(digests: np.ndarray):
    """(first, inverse) for an (n, k) uint8 array: `first` the row index of each distinct row's
    first occurrence, ascending; `inverse[i]` the index into `first` of row i's digest."""
    count, width = digests.shape
    if count == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lead = np.zeros((count, 8), dtype=np.uint8)
    lead[:, : min(8, width)] = digests[:, :8]
    order = np.argsort(lead.view("<u8").reshape(-1), kind="stable")
    ranked = digests[order]
    same = (ranked[1:] == ranked[:-1]).all(axis=1)
    lead_sorted = lead.view("<u8").reshape(-1)[order]
    if width > 8 and ((lead_sorted[1:] == lead_sorted[:-1]) & ~same).any():
        # Two digests share their first 8 bytes: order by every byte (stable, so each
        # group still starts at its first occurrence).
        order = np.lexsort(digests.T[::-1])
        ranked = digests[order]
        same = (ranked[1:] == ranked[:-1]).all(axis=1)
    group = np.concatenate(([0], np.cumsum(~same)))
    group_first = order[np.flatnonzero(np.concatenate(([True], ~same)))]
    # Groups in first-occurrence order without another sort: mark each group's first row.
    is_first = np.zeros(count, dtype=bool)
    is_first[group_first] = True
    rank = np.cumsum(is_first)[group_first] - 1
    inverse = np.empty(count, dtype=np.int64)
    inverse[order] = rank[group]
    return np.flatnonzero(is_first), inverse
