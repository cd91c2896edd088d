"""RemoteChunkCache over a bytes oracle (no network): LRU order, the byte budget, clamping."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from seglog_server.storage.remote.remote_chunk_cache import RemoteChunkCache


def fetcher(data: bytes, calls: list):
    def fetch(first, last):
        calls.append((first, last))
        return data[first:last + 1]
    return fetch


def test_reads_across_chunks_fetch_each_chunk_once():
    data = os.urandom(1000)
    calls = []
    cache = RemoteChunkCache(cache_bytes_max=1000, chunk_bytes=100)
    assert cache.read("s", len(data), 50, 200, fetcher(data, calls)) == data[50:250]
    assert cache.read("s", len(data), 120, 100, fetcher(data, calls)) == data[120:220]
    assert calls == [(0, 99), (100, 199), (200, 299)]
    stats = cache.statistics()
    assert (stats.hit_count, stats.miss_count, stats.cached_bytes) == (2, 3, 300)


def test_least_recently_used_chunk_is_evicted_first():
    data = os.urandom(400)
    calls = []
    cache = RemoteChunkCache(cache_bytes_max=200, chunk_bytes=100)
    fetch = fetcher(data, calls)
    cache.read("s", 400, 0, 1, fetch)    # chunk 0
    cache.read("s", 400, 100, 1, fetch)  # chunk 1
    cache.read("s", 400, 0, 1, fetch)    # chunk 0 used again: chunk 1 is now the oldest
    cache.read("s", 400, 200, 1, fetch)  # chunk 2 evicts chunk 1
    calls.clear()
    cache.read("s", 400, 0, 1, fetch)
    assert calls == []
    cache.read("s", 400, 100, 1, fetch)
    assert calls == [(100, 199)]
    assert cache.statistics().eviction_count == 2


def test_last_chunk_is_short_and_reads_clamp_to_the_segment_end():
    data = os.urandom(250)
    cache = RemoteChunkCache(cache_bytes_max=1000, chunk_bytes=100)
    assert cache.read("s", 250, 180, 1000, fetcher(data, [])) == data[180:]
    assert cache.read("s", 250, 250, 10, fetcher(data, [])) == b""
    assert cache.statistics().cached_bytes == 150


def test_segments_with_different_ids_never_share_chunks():
    a, b = os.urandom(100), os.urandom(100)
    cache = RemoteChunkCache(cache_bytes_max=1000, chunk_bytes=100)
    assert cache.read("a", 100, 0, 100, fetcher(a, [])) == a
    assert cache.read("b", 100, 0, 100, fetcher(b, [])) == b
    cache.invalidate("a")
    assert cache.statistics().cached_bytes == 100


def test_size_zero_disables_caching():
    data = os.urandom(100)
    calls = []
    cache = RemoteChunkCache(cache_bytes_max=0, chunk_bytes=10)
    for _ in range(2):
        assert cache.read("s", 100, 5, 20, fetcher(data, calls)) == data[5:25]
    assert len(calls) == 6 and cache.statistics().cached_bytes == 0


@given(st.data())
def test_cache_never_exceeds_its_budget_and_equals_the_oracle(draw):
    chunk = draw.draw(st.integers(1, 64))
    cache = RemoteChunkCache(draw.draw(st.integers(chunk, chunk * 6)), chunk)
    segments = {sid: os.urandom(draw.draw(st.integers(1, 400))) for sid in "abc"}
    for _ in range(draw.draw(st.integers(1, 40))):
        sid = draw.draw(st.sampled_from("abc"))
        data = segments[sid]
        position = draw.draw(st.integers(0, len(data)))
        size = draw.draw(st.integers(0, 3 * chunk))
        assert cache.read(sid, len(data), position, size, fetcher(data, [])) == data[position:position + size]
        assert cache.statistics().cached_bytes <= cache.cache_bytes_max
