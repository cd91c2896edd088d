"""Property: for any keyed workload (overwrites, tombstones, rolls anywhere), snapshotting it,
cleaning any prefix of the snapshot with the latest-offset-per-key rule and installing the
result keeps the key -> latest value map, keeps every retained record at its offset with its
bytes, changes nothing past the replaced range, and survives a reload from disk."""

from __future__ import annotations

import itertools
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import RecordBatchBuilder
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.fs import REAL_FS
from seglog_server.storage.cleaning.log_cleaning_install import install_cleaned
from seglog_server.storage.cleaning.log_snapshot import take_snapshot
from tests.support.cleaning_support import hand_clean

from tests.support.log_test_support import config, open_log, reopen
from test_log_cleaner_manager import replay

NOW_MS = 1_700_000_000_000
_ids = itertools.count()

operation = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 5), st.booleans()),  # key, tombstone?
    st.tuples(st.just("roll"), st.just(0), st.just(False)),
)


def keyed(key: bytes, value: bytes | None) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(value, key=key, timestamp_ms=NOW_MS)
    return builder.build()


def latest(records) -> dict:
    out = {}
    for _, key, value in records:
        out[key] = value
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(operation, min_size=1, max_size=60), prefix=st.integers(1, 8))
def test_installing_a_latest_per_key_cleaning_keeps_the_log_equivalent(operations, prefix):
    with tempfile.TemporaryDirectory() as root:
        clock = FakeClock(NOW_MS)
        log = open_log(f"{root}/c-0", clock, config(cleanup_policy=frozenset({"compact"})))
        for kind, key, tombstone in operations:
            if kind == "append":
                log.append(keyed(b"k%d" % key, None if tombstone else b"v%d" % next(_ids)))
            elif log.segments_snapshot()[-1].size_in_bytes:
                log.roll()
        before = replay(log)
        closed = [s for s in log.segments_snapshot()[:-1] if s.size_in_bytes]
        if not closed:
            log.close()
            return
        taken = take_snapshot(log, root, checkpoint=None, now_ms=NOW_MS, snapshot_id=f"s{next(_ids)}", fs=REAL_FS)
        replaced = min(prefix, len(taken.manifest.segments))
        hand_clean(taken.path, replaced_count=replaced)
        install_cleaned(log, taken.path, taken.manifest, expected_segments=taken.segments, fs=REAL_FS)
        after = replay(log)
        end = (taken.manifest.segments[replaced].base_offset if replaced < len(taken.manifest.segments)
               else taken.manifest.first_uncleanable_offset)
        assert latest(after) == latest(before)
        assert set(after) <= set(before)  # same offset, key and value for every retained record
        assert [r for r in after if r[0] >= end] == [r for r in before if r[0] >= end]
        assert log.log_end_offset == before[-1][0] + 1
        assert replay(reopen(log, clock)) == after
