"""Cleaning keeps each active producer's last batch (Kafka's LogCleaner RETAIN_EMPTY rule,
kafka-storage.md 6.3; LogCleanerTest.testDuplicateCheckAfterCleaning): the snapshot manifest
names every producer's last offset, the cleaner keeps that batch (as an empty 61-byte batch when
all its records are superseded), so producer state rebuilt from the cleaned log alone (every
producer snapshot gone, as after an unclean truncation below all of them) still knows the
producer and answers a late retry of its last batch as a duplicate."""

from __future__ import annotations

import itertools
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, batch, config, open_log

from seglog.records import iter_batches
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.fs import REAL_FS
from seglog_server.storage.log.unified_log import Log
from seglog_server.storage.cleaning.log_cleaning_install import install_cleaned
from seglog_server.storage.cleaning.log_snapshot import take_snapshot
from seglog_server.storage.producers.producer_snapshot import snapshot_path
from seglog_server.storage.producers.producer_state_loader import list_snapshot_offsets, load_producer_state
from seglog_spark.cleaner_local import clean_snapshot

COMPACTED = config(cleanup_policy=frozenset({"compact"}))
SMALL_MAP = 1 << 14
_ids = itertools.count()


def idem(pid: int, sequence: int, *keys: bytes, epoch: int = 0) -> bytes:
    return batch(*(b"v%d" % next(_ids) for _ in keys), keys=list(keys), producer_id=pid, producer_epoch=epoch,
                 base_sequence=sequence)


def clean(log: Log, root: str) -> None:
    """One offline cleaning with the single-process engine, installed into ``log``."""
    taken = take_snapshot(log, root, checkpoint=None, now_ms=NOW_MS, snapshot_id=f"s{next(_ids)}", fs=REAL_FS)
    clean_snapshot(taken.path, map_bytes=SMALL_MAP)
    install_cleaned(log, taken.path, taken.manifest, expected_segments=taken.segments, fs=REAL_FS)


def rebuilt_after_losing_every_snapshot(log: Log, clock: FakeClock) -> Log:
    """kill -9, every producer snapshot deleted, then the load: the state comes from the log alone."""
    log.close_handlers()
    for offset in list_snapshot_offsets(REAL_FS, log.dir):
        os.unlink(snapshot_path(log.dir, offset))
    return open_log(log.dir, clock, log.config, had_clean_shutdown=False, recovery_point=0,
                    log_start_offset=log.log_start_offset)


def test_a_late_retry_of_a_superseded_last_batch_is_a_duplicate_after_cleaning_and_a_rebuild(tmp_path):
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path / "c-0", clock, COMPACTED)
    log.append(idem(4000, 0, b"a", b"b"))  # producer 4000's last batch: offsets 0-1, sequences 0-1
    log.append(idem(4001, 0, b"a", b"b"))  # supersedes both of its records
    log.append(batch(b"x", keys=[b"c"]))
    log.roll()
    log.append(batch(b"y", keys=[b"d"]))
    clean(log, str(tmp_path))
    log = rebuilt_after_losing_every_snapshot(log, clock)
    end = log.log_end_offset
    retried = log.append(idem(4000, 0, b"a", b"b"))
    assert (retried.base_offset, retried.last_offset, retried.record_count) == (0, 1, 0)
    assert log.log_end_offset == end
    log.close()


def test_the_kept_last_batch_is_an_empty_kafka_batch_with_the_producer_fields(tmp_path):
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path / "c-0", clock, COMPACTED)
    log.append(idem(4000, 7, b"a", b"b", epoch=3))
    log.append(batch(b"new-a", b"new-b", b"c", keys=[b"a", b"b", b"c"]))
    log.append(batch(b"last", keys=[b"d"]))
    log.roll()
    clean(log, str(tmp_path))
    first = next(iter_batches(log.read(0, 1 << 20).records))
    assert (first.base_offset, first.last_offset, first.records_count, first.size_in_bytes) == (0, 1, 0, 61)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (4000, 3, 7)
    first.ensure_valid()
    log.close()


def test_the_manifest_names_the_producers_whose_last_batch_is_in_the_snapshot(tmp_path):
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path / "c-0", clock, COMPACTED)
    log.append(idem(4000, 0, b"a"))
    log.append(idem(4001, 0, b"b"))
    log.append(idem(4000, 1, b"c"))
    log.roll()
    log.append(idem(4002, 0, b"d"))  # in the active segment: not in the snapshot
    taken = take_snapshot(log, str(tmp_path), checkpoint=None, now_ms=NOW_MS, snapshot_id="s", fs=REAL_FS)
    assert [(p.producer_id, p.last_offset) for p in taken.manifest.producers] == [(4001, 1), (4000, 2)]
    log.close()


def test_a_producers_earlier_batches_are_still_cleaned_away(tmp_path):
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path / "c-0", clock, COMPACTED)
    log.append(idem(4000, 0, b"a"))
    log.append(idem(4000, 1, b"a"))  # its last batch: the first one is superseded and not its last
    log.append(batch(b"last", keys=[b"d"]))
    log.roll()
    clean(log, str(tmp_path))
    kept = [(b.base_offset, b.records_count) for b in iter_batches(log.read(0, 1 << 20).records)]
    assert kept == [(1, 1), (2, 1)]
    log.close()


# -- property: any interleaving of producers, keys, epochs and rolls ----------------------------

PRODUCERS = (5000, 5001, 5002)
operation = st.one_of(
    st.tuples(st.just("send"), st.sampled_from(PRODUCERS), st.lists(st.integers(0, 3), min_size=1, max_size=3)),
    st.tuples(st.just("plain"), st.just(0), st.lists(st.integers(0, 3), min_size=1, max_size=3)),
    st.tuples(st.just("bump"), st.sampled_from(PRODUCERS), st.just([])),  # a new epoch, sequences from 0
    st.tuples(st.just("roll"), st.just(0), st.just([])),
)


def last_batches(log: Log, empty_dir: str) -> dict[int, tuple]:
    """Per producer, what a rebuild from the log alone (no snapshot) knows of its last batch."""
    state = load_producer_state(
        "rebuild", REAL_FS, empty_dir, log.segments_snapshot(),
        log_start_offset=log.log_start_offset, log_end_offset=log.log_end_offset,
        had_clean_shutdown=False, now_ms=NOW_MS, expiration_ms=log.config.producer_id_expiration_ms,
    )
    out = {}
    for pid in PRODUCERS:
        entry = state.entry(pid)
        if entry is not None and entry.batches:
            last = entry.batches[-1]
            out[pid] = (entry.epoch, last.last_sequence, last.first_offset, last.last_offset)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(operation, min_size=1, max_size=40))
def test_cleaning_keeps_what_a_rebuild_knows_of_each_producers_last_batch(operations):
    with tempfile.TemporaryDirectory() as root:
        clock = FakeClock(NOW_MS)
        log = open_log(f"{root}/c-0", clock, COMPACTED)
        os.mkdir(f"{root}/empty")
        epochs = dict.fromkeys(PRODUCERS, 0)
        sequences = dict.fromkeys(PRODUCERS, 0)
        for kind, pid, keys in operations:
            if kind == "send":
                log.append(idem(pid, sequences[pid], *(b"k%d" % k for k in keys), epoch=epochs[pid]))
                sequences[pid] += len(keys)
            elif kind == "plain":
                log.append(batch(*(b"v" for _ in keys), keys=[b"k%d" % k for k in keys]))
            elif kind == "bump":
                epochs[pid] += 1
                sequences[pid] = 0
            elif log.segments_snapshot()[-1].size_in_bytes:
                log.roll()
        if not log.log_end_offset:
            log.close()
            return
        if log.segments_snapshot()[-1].size_in_bytes:
            log.roll()  # everything written becomes cleanable
        before = last_batches(log, f"{root}/empty")
        clean(log, root)
        assert last_batches(log, f"{root}/empty") == before
        log.close()
