"""A rotted offset index uploaded with a remote segment never makes a read below the local log
skip records: the batch at an entry's position must start at or below the entry's offset, as
the local read path requires (LogSegment._search_from_entry); one that does not is passed over
for an earlier entry, or the segment's start. Against a real S3-compatible server (weed)."""

from __future__ import annotations

import pytest
from tests.integration.remote.test_tiered_log import manager_for, produce, run_passes
from tests.support.log_test_support import offsets_of

from seglog_server.storage.base.clock import FakeClock

TIERED_INDEXED = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "1",
                  "index.interval.bytes": "600"}


def _rot(rsm, name, rot):
    key = next(k for k in rsm.store.list("") if k.endswith(".index") and name in k)
    index = bytearray(rsm.store.get(key, 1 << 20))
    entries = len(index) // 8
    assert entries > 8
    for slot, (relative, position) in rot(entries, index).items():
        if relative is not None:
            index[slot * 8:slot * 8 + 4] = relative.to_bytes(4, "big")
        if position is not None:
            index[slot * 8 + 4:slot * 8 + 8] = position.to_bytes(4, "big")
    rsm.store.put(key, bytes(index), len(index), create_only=False)


def _entry(index, slot):
    return int.from_bytes(index[slot * 8:slot * 8 + 4], "big"), int.from_bytes(index[slot * 8 + 4:slot * 8 + 8], "big")


ROTS = {
    "mid-file offset down": lambda n, index: {n // 2: (3, None)},
    "first entry": lambda n, index: {0: (0, None)},
    "position forward": lambda n, index: {n // 2: (None, _entry(index, n // 2 + 1)[1])},
    "position inside a batch": lambda n, index: {n // 2: (None, _entry(index, n // 2)[1] + 7)},
    "position past the end": lambda n, index: {n // 2: (None, 10**8)},
    "several out of order": lambda n, index: {n // 4: (5, None), n // 4 + 1: (2, None), n // 4 + 2: (None, 3)},
}


@pytest.mark.parametrize("name", sorted(ROTS))
def test_a_rotted_uploaded_offset_index_changes_no_remote_read(weed, prefix, tmp_path, name):
    clock = FakeClock()
    manager, rsm = manager_for(tmp_path, weed.endpoint, prefix, clock)
    manager.create_topic("t", 1, TIERED_INDEXED)
    log = manager.get_log("t", 0)
    produce(log, clock, 150)
    run_passes(manager)
    run_passes(manager)
    local_start = log.local_log_start_offset
    assert local_start > 60
    before = [offsets_of(log.read(offset, 1 << 20).records)[:3] for offset in range(local_start)]
    remote = log.remote_tier.segments()
    manager.shutdown()
    _rot(rsm, remote[0].segment_id, ROTS[name])  # the first remote segment's index
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)  # a fresh chunk cache
    try:
        log = manager.get_log("t", 0)
        manager.run_remote_pass()
        after = [offsets_of(log.read(offset, 1 << 20).records)[:3] for offset in range(local_start)]
        assert after == before  # before: a lying entry's position skipped the batches before it
    finally:
        manager.shutdown()
