"""An active segment's index cut short from outside the process, then appended to: the append is
refused before its batch is written.

The segment backs the next index slot (``reserve_next_entry``, with the index's length check)
before it writes a batch an index entry is due for. When that check ran only after the write, the
refused batch stayed in the ``.log`` with no offset handed out for it, every retry wrote another
copy, and a restart's recovery kept the first one as a record the producer had been told failed.
"""

from __future__ import annotations

import glob
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import CorruptIndexError
from tests.support.log_test_support import NOW_MS, all_offsets, batch, config, open_log, values_of


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_append_to_a_cut_index_writes_nothing(tmp_path, suffix: str) -> None:
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path, clock, config(index_interval_bytes=1))  # an entry due every batch
    for _ in range(3):
        log.append(batch(b"kept" * 25))
    (log_file,) = glob.glob(os.path.join(tmp_path, "*.log"))
    (index_file,) = glob.glob(os.path.join(tmp_path, "*" + suffix))
    size = os.path.getsize(log_file)
    os.truncate(index_file, 8)  # cut from outside, inside its first entry

    for _ in range(3):
        with pytest.raises(CorruptIndexError):
            log.append(batch(b"refused" * 15))
        assert os.path.getsize(log_file) == size
        assert log.log_end_offset == 3

    # As after a crash (no close: closing trims the cut index, refused the same way).
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False)
    assert all_offsets(reopened) == [0, 1, 2]
    assert values_of(reopened.read(0, 1 << 20).records) == [b"kept" * 25] * 3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    suffix=st.sampled_from([".index", ".timeindex"]),
    kept=st.integers(min_value=1, max_value=6),
    cut_to=st.integers(min_value=0, max_value=4096),
    interval=st.sampled_from([1, 150, 4096]),
)
def test_no_append_after_a_cut_leaves_bytes_behind(tmp_path_factory, suffix, kept, cut_to, interval) -> None:
    """Whatever the index, its cut and how often entries fall due: an append either lands whole
    (no entry due: the index is not touched) or is refused with the log as it was."""
    directory = tmp_path_factory.mktemp("cut")
    clock = FakeClock(NOW_MS)
    log = open_log(directory, clock, config(index_interval_bytes=interval))
    for _ in range(kept):
        log.append(batch(b"kept" * 25))
    (log_file,) = glob.glob(os.path.join(directory, "*.log"))
    (index_file,) = glob.glob(os.path.join(directory, "*" + suffix))
    os.truncate(index_file, cut_to)
    landed = []
    for number in range(3):
        size, end = os.path.getsize(log_file), log.log_end_offset
        try:
            log.append(batch(b"next" * 25))
        except CorruptIndexError:
            assert (os.path.getsize(log_file), log.log_end_offset) == (size, end)
        else:
            landed.append(end)
    reopened = open_log(directory, clock, log.config, had_clean_shutdown=False)
    assert all_offsets(reopened) == list(range(kept)) + landed
