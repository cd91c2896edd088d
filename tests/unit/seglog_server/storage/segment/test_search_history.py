"""A search of a damaged .log answers or fails as it does as the first search of a freshly opened
log: what the searches before it met changes nothing. A search that meets damage rebuilds the
segment's offset index from the log (once); that rebuild must never leave an index worse than the
one it replaces. Found by Hypothesis in test_batch_directory.py: a batch whose base offset rotted
below its predecessor's made the rebuild stop at it (the entries must rise), so the entries past
the damage (the only way past it) were gone, and a lookup by time that answered before the
rebuild failed after it. A rebuild meeting offsets that do not rise now keeps the index.

Lookups by time go through the indexes and header scans only (``scans_only``: no batch directory,
no time-step table), the path every other lookup is held to."""

from __future__ import annotations

import os
import shutil
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, batch, batch_positions, config, open_log, poke, scans_only

from seglog import records as codec
from seglog.records import LENGTH_OFFSET
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import StorageError

BATCHES = 60
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# Where a field lies in a v2 batch header (a record's bytes: past the 61-byte header).
FIELDS = {"length": (LENGTH_OFFSET, _INT32), "base_offset": (0, _INT64), "max_timestamp": (35, _INT64),
          "record": (61, _INT32)}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One segment of BATCHES two-record batches (batch ``i``: offsets 2i and 2i + 1, stamped
    ``i`` and ``i - 3`` past NOW_MS), a sparse index (an entry at every second batch from the
    second), closed cleanly."""
    directory = tmp_path_factory.mktemp("history") / "topic-0"
    log = _open(directory)
    for index in range(BATCHES):
        log.append(batch(b"a" * 30, b"b" * 30, timestamps=[NOW_MS + index, NOW_MS + index - 3]))
    log.flush()
    log.close()
    return directory


def _open(directory):
    return open_log(directory, FakeClock(NOW_MS), config(segment_bytes=1 << 20, index_interval_bytes=200))


def _outcome(log, target: tuple[str, int]):
    kind, value = target
    try:
        with scans_only(log):
            if kind == "time":
                return log.offset_for_timestamp(NOW_MS + value)
            return [b.base_offset for b in codec.iter_batches(log.read(value, 200).records)][:2]
    except StorageError as exc:
        return type(exc)


# Searches near the damaged batch (relative to it: the index entries just past it are what a
# search beyond it starts from), values in the offsets' range as often as anywhere.
nearby = st.lists(st.tuples(st.sampled_from(["time", "offset"]), st.integers(-6, 12)), min_size=1, max_size=8)
values = st.one_of(st.integers(-3, 2 * BATCHES), st.integers(-(2**31), 2**31 - 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(victim=st.one_of(st.integers(1, BATCHES // 2 - 1).map(lambda half: 2 * half), st.integers(0, BATCHES - 1)),
       field=st.sampled_from(sorted(FIELDS)), value=values, near=nearby)
@example(victim=6, field="base_offset", value=-1, near=[("time", 2)])  # the one found
def test_a_search_of_a_damaged_log_answers_as_the_first_search_of_a_fresh_log(
        written, tmp_path_factory, victim, field, value, near):
    # A search that meets the damaged batch first (a batch holding an index entry as often as
    # not), then searches near it, past it mostly.
    searches = [("time", victim)] + [
        (kind, victim + step if kind == "time" else 2 * (victim + step)) for kind, step in near]
    damaged = tmp_path_factory.mktemp("damaged") / "topic-0"
    shutil.copytree(written, damaged)
    path = os.path.join(damaged, "00000000000000000000.log")
    at, packer = FIELDS[field]
    poke(path, batch_positions(path)[victim] + at, packer, value)
    in_turn = _outcomes(tmp_path_factory, damaged, searches)
    for target, outcome in zip(searches, in_turn):
        # The file as damaged, its index as the first search found it (a rebuild writes it).
        assert outcome == _outcomes(tmp_path_factory, damaged, [target])[0], (target, searches)


def _outcomes(tmp_path_factory, damaged, searches) -> list:
    """The outcomes of ``searches`` in turn, on a log opened from a copy of ``damaged``."""
    copy = tmp_path_factory.mktemp("searched") / "topic-0"
    shutil.copytree(damaged, copy)
    log = _open(copy)
    try:
        return [_outcome(log, target) for target in searches]
    finally:
        log.close()
