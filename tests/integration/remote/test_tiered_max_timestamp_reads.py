"""MAX_TIMESTAMP (-3) on a tiered log whose greatest timestamp is in a remote segment reads the
time index and batch headers, and the body of the one batch holding it: not every body from the
segment's start (a whole segment's GETs, and the chunk cache flushed). Counted in the bytes the
store sent, against a real S3-compatible server (weed)."""

from __future__ import annotations

import pytest
from tests.support.log_test_support import batch

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.log.log_results import MAX_TIMESTAMP
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.remote import ObjectStore, RemoteStorageManager

from tests.integration.remote.conftest import store_config
from tests.integration.remote.test_tiered_log import EVERY_PASS, run_passes

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
BATCH_COUNT = 8
VALUE_BYTES = 60_000
# Chunks smaller than a batch: a header read fetches one chunk, a body read several.
CACHE_BYTES = 16 * 1024


@pytest.fixture
def manager(weed, prefix, tmp_path):
    clock = FakeClock()
    rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, prefix)), clock=clock)
    manager = LogManager([str(tmp_path / "data")], clock=clock, intervals=EVERY_PASS, remote_storage=rsm,
                         remote_fetch_cache_bytes=CACHE_BYTES)
    manager.startup()
    yield manager
    manager.shutdown()


@pytest.mark.parametrize("max_at", [0, BATCH_COUNT // 2, BATCH_COUNT - 1])
def test_max_timestamp_in_a_remote_segment_reads_one_batch_body(manager, max_at):
    manager.create_topic("big", 1, {"remote.storage.enable": "true", "local.retention.bytes": "1",
                                    "segment.bytes": str(4 * 1024 * 1024), "retention.ms": "-1"})
    log = manager.get_log("big", 0)
    for i in range(BATCH_COUNT):
        log.append(batch(b"v" * VALUE_BYTES, timestamps=T0 + (10_000 if i == max_at else i)))
    log.roll()
    log.append(batch(b"local", timestamps=T0))  # local retention deletes a segment only below another's bytes
    for _ in range(2):  # the upload, then local retention deleting the uploaded segment
        run_passes(manager)
    [segment] = log.remote_tier.segments()
    assert log.local_log_start_offset == BATCH_COUNT  # the batches are in the store only
    rsm = manager._remote_storage
    before = rsm.fetch_bytes
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (T0 + 10_000, max_at)
    fetched = rsm.fetch_bytes - before
    # The one body, a chunk per header walked, the time and offset indexes: well under the
    # segment (every body up to the answer read before).
    assert fetched < VALUE_BYTES + 3 * CACHE_BYTES + segment.files[".timeindex"] + segment.files[".index"], (
        fetched, segment.segment_bytes)
