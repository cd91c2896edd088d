"""The chunk cache in front of a real store: whatever reads come, it holds at most its budget and
answers the same bytes as a direct ranged GET of the segment's object."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.remote.conftest import TOPIC_ID

from seglog_server.storage.remote import RemoteChunkCache, RemoteStorageManager
from seglog_server.storage.remote.remote_log_metadata import segment_object_key

pytestmark = pytest.mark.timeout(120)

CHUNK_BYTES = 4096


@pytest.fixture
def uploaded(store, make_segment):
    """Three remote segments of uneven sizes (one a chunk and a byte), uploaded once per test."""
    manager = RemoteStorageManager(store)
    return manager, [manager.copy_log_segment(TOPIC_ID, make_segment(base_offset=b, log_bytes=size).data)
                     for b, size in ((0, 30_000), (100, 5_000), (200, 3 * CHUNK_BYTES + 1))]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget_chunks=st.integers(1, 5),
       reads=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30_000), st.integers(0, 3 * CHUNK_BYTES)),
                      min_size=1, max_size=12))
def test_cached_reads_equal_direct_gets_and_stay_in_budget(store, uploaded, budget_chunks, reads):
    manager, segments = uploaded
    cache = RemoteChunkCache(cache_bytes_max=budget_chunks * CHUNK_BYTES, chunk_bytes=CHUNK_BYTES)
    for index, position, size in reads:
        segment = segments[index]
        position = min(position, segment.segment_bytes - 1)
        got = cache.read(segment.segment_id, segment.segment_bytes, position, size,
                         lambda first, last, s=segment: manager.fetch_log_segment(s, first, last - first + 1))
        last = min(position + size, segment.segment_bytes) - 1
        direct = (store.get(segment_object_key(segment, ".log"), size, position, last)
                  if last >= position else b"")
        assert got == direct
        assert cache.statistics().cached_bytes <= cache.cache_bytes_max
