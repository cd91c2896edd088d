"""Uploads run on the remote uploader's own thread: a store that accepts and never answers (the
loopback proxy holding every call, as a SIGSTOPped store does) holds that thread only, while the
maintenance pass deletes and flushes another partition; the uploader stops at shutdown within its
bound even then."""

from __future__ import annotations

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.remote import ObjectStore, RemoteStorageManager

from tests.integration.remote.conftest import store_config
from tests.integration.remote.test_tiered_log import EVERY_PASS, TIERED, produce


def test_a_silent_store_holds_the_uploader_and_not_the_other_partitions_maintenance(weed, proxy, prefix, tmp_path):
    clock = FakeClock()
    rsm = RemoteStorageManager(ObjectStore(store_config(proxy.endpoint, prefix)), clock=clock)
    manager = LogManager([str(tmp_path / "data")], clock=clock, intervals=EVERY_PASS, remote_storage=rsm,
                         remote_fetch_cache_bytes=1 << 20)
    manager.startup()
    try:
        manager.create_topic("tiered", 1, TIERED)
        manager.create_topic("plain", 1, {"segment.bytes": "1024", "retention.ms": "60000", "flush.ms": "1000"})
        tiered, plain = manager.get_log("tiered", 0), manager.get_log("plain", 0)
        produce(plain, clock, 10)
        segments_before = plain.segment_count
        assert segments_before > 2
        proxy.mode = "stall"  # every store call from now on is accepted and never answered
        produce(tiered, clock, 10)
        manager.start_remote_uploader(interval_ms=10)
        assert proxy.stalled.wait(30), "the uploader never called the store"
        clock.advance(120_000)  # past retention.ms and flush.ms of the plain partition
        manager.run_maintenance()
        assert plain.segment_count == 1 < segments_before  # retention ran
        assert plain.recovery_point == plain.log_end_offset  # and the flush by time
        assert tiered.remote_tier.last_error is None  # while the upload is still held
        assert tiered.segment_count > 2 and tiered.log_start_offset == 0  # nothing local went
    finally:
        manager.shutdown()  # bounded: the uploader is a daemon still in its store call
