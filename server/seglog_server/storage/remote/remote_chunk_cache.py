"""A bounded, least-recently-used cache of fixed-size chunks of remote segments' logs.

A remote read asks for ``size`` bytes at ``position`` of one segment; the cache splits the segment
into chunks of ``chunk_bytes`` (chunk ``i`` covers ``[i * chunk_bytes, (i + 1) * chunk_bytes)``,
the last one shorter), fetches the missing ones by ranged GET and keeps them, evicting the least
recently used chunks so their total never exceeds ``cache_bytes_max``. A consumer catching up reads
a segment front to back, so each chunk is fetched once and served many times.

Chunks are keyed by the segment's random id, which no other upload shares, so a cached chunk can
never be stale: a segment's objects never change once its copy finished.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CHUNK_BYTES_DEFAULT", "ChunkCacheStatistics", "RemoteChunkCache"]

# 4 MiB: large enough that a GET's fixed latency (a few ms on a LAN store, tens on S3) is small
# beside its transfer, small enough that a fetch of a few KiB does not pull a whole 1 GiB segment
# (Kafka's tiered-storage plugins use 4-16 MiB chunks).
CHUNK_BYTES_DEFAULT = 4 * 1024 * 1024

# fetch(first, last) -> the segment's bytes first..last inclusive (a ranged GET).
FetchRange = Callable[[int, int], bytes]


@dataclass(frozen=True)
class ChunkCacheStatistics:
    chunk_count: int
    cached_bytes: int
    cache_bytes_max: int
    hit_count: int
    miss_count: int
    eviction_count: int


class RemoteChunkCache:
    def __init__(self, cache_bytes_max: int, chunk_bytes: int = CHUNK_BYTES_DEFAULT) -> None:
        assert chunk_bytes > 0, chunk_bytes
        # 0 disables caching; otherwise one chunk must fit, or nothing would ever be kept.
        assert cache_bytes_max == 0 or cache_bytes_max >= chunk_bytes, (cache_bytes_max, chunk_bytes)
        self.cache_bytes_max = cache_bytes_max
        self.chunk_bytes = chunk_bytes
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._cached_bytes = 0
        self._hits = self._misses = self._evictions = 0
        self._lock = threading.Lock()

    def read(self, segment_id: str, segment_bytes: int, position: int, size: int,
             fetch: FetchRange) -> bytes:
        """Bytes ``position .. position + size`` of the segment (clamped to its end)."""
        assert 0 <= position and size >= 0, (position, size)
        end = min(position + size, segment_bytes)
        if end <= position:
            return b""
        parts = []
        for index in range(position // self.chunk_bytes, (end - 1) // self.chunk_bytes + 1):
            chunk = self._chunk(segment_id, segment_bytes, index, fetch)
            chunk_start = index * self.chunk_bytes
            parts.append(chunk[max(position - chunk_start, 0):end - chunk_start])
        return b"".join(parts)

    def _chunk(self, segment_id: str, segment_bytes: int, index: int, fetch: FetchRange) -> bytes:
        key = (segment_id, index)
        with self._lock:
            chunk = self._chunks.get(key)
            if chunk is not None:
                self._chunks.move_to_end(key)
                self._hits += 1
                return chunk
            self._misses += 1
        first = index * self.chunk_bytes
        last = min(first + self.chunk_bytes, segment_bytes) - 1
        chunk = fetch(first, last)  # outside the lock: a slow GET stalls no other reader
        assert len(chunk) == last - first + 1, (len(chunk), first, last)
        self._keep(key, chunk)
        return chunk

    def _keep(self, key: tuple[str, int], chunk: bytes) -> None:
        if len(chunk) > self.cache_bytes_max:
            return
        with self._lock:
            if key in self._chunks:  # another reader fetched it meanwhile
                return
            while self._cached_bytes + len(chunk) > self.cache_bytes_max:
                _, evicted = self._chunks.popitem(last=False)
                self._cached_bytes -= len(evicted)
                self._evictions += 1
            self._chunks[key] = chunk
            self._cached_bytes += len(chunk)
            assert self._cached_bytes <= self.cache_bytes_max

    def invalidate(self, segment_id: str) -> None:
        """Drop a deleted segment's chunks (they could not be served anyway: its id is gone)."""
        with self._lock:
            for key in [k for k in self._chunks if k[0] == segment_id]:
                self._cached_bytes -= len(self._chunks.pop(key))

    def statistics(self) -> ChunkCacheStatistics:
        with self._lock:
            return ChunkCacheStatistics(
                chunk_count=len(self._chunks), cached_bytes=self._cached_bytes,
                cache_bytes_max=self.cache_bytes_max, hit_count=self._hits,
                miss_count=self._misses, eviction_count=self._evictions)
