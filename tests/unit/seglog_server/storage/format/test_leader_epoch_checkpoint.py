"""leader-epoch-checkpoint: Kafka's text envelope byte for byte, a bounded reader that refuses
hostile files with one error, atomic writes through the fs seam."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.fault_fs import FaultFs

from seglog_server.storage.base.errors import CorruptCheckpointError
from seglog_server.storage.format.leader_epoch_checkpoint import (
    ENTRY_COUNT_MAX,
    LEADER_EPOCH_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT_BYTES_MAX,
    EpochEntry,
    LeaderEpochCheckpointFile,
    format_epochs,
    parse_epochs,
)

# As Kafka's LeaderEpochCheckpointFile writes it: version 0, the count, "<epoch> <startOffset>".
GOLDEN = b"0\n3\n0 0\n2 57\n7 1200\n"
GOLDEN_ENTRIES = [EpochEntry(0, 0), EpochEntry(2, 57), EpochEntry(7, 1200)]

_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1


def test_format_writes_kafkas_golden_text():
    assert format_epochs(GOLDEN_ENTRIES) == GOLDEN


def test_format_of_no_entries_is_version_and_zero():
    assert format_epochs([]) == b"0\n0\n"


def test_parse_reads_the_golden_text():
    assert parse_epochs(GOLDEN) == GOLDEN_ENTRIES


def test_parse_accepts_whitespace_runs_crlf_and_no_final_newline():
    assert parse_epochs(b"0\r\n2\r\n1 \t 5\r\n3  9  ") == [EpochEntry(1, 5), EpochEntry(3, 9)]


@pytest.mark.parametrize("data", [b"", b"0", b"0\n"])
def test_an_empty_or_countless_file_has_no_entries(data):
    assert parse_epochs(data) == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"1\n0\n", "unrecognised version 1"),
        (b"0\n2\n1 5\n", "expected 2 entries, found 1"),
        (b"0\n1\n1 5\n2 6\n", "expected 1 entries, found 2"),
        (b"0\n-1\n", "malformed line"),
        (f"0\n{ENTRY_COUNT_MAX + 1}\n".encode(), "malformed line"),
        (b"0\n1\n-1 5\n", "malformed line"),  # a negative epoch is never written
        (b"0\n1\n1 -5\n", "malformed line"),
        (b"0\n1\n1 5 6\n", "malformed line"),
        (b"0\n1\n1\n", "malformed line"),
        (b"0\n1\n1_0 5\n", "malformed line"),  # Python's int() takes '_', Java's does not
        (f"0\n1\n{_INT32_MAX + 1} 5\n".encode(), "malformed line"),
        (f"0\n1\n1 {_INT64_MAX + 1}\n".encode(), "malformed line"),
        (b"0\n1\n1 " + b"9" * 5000 + b"\n", "malformed line"),  # no quadratic int() on a digit flood
        (b"0\n2\n3 5\n3 9\n", "epochs and start offsets must both increase"),
        (b"0\n2\n3 5\n4 5\n", "epochs and start offsets must both increase"),
        (b"0\n2\n4 5\n3 9\n", "epochs and start offsets must both increase"),
        (b"0\n1\n1 \xff\n", "not ASCII text"),
    ],
)
def test_parse_refuses_a_bad_file_with_one_error_naming_it(data, message):
    with pytest.raises(CorruptCheckpointError, match=message) as caught:
        parse_epochs(data, "/p/leader-epoch-checkpoint")
    assert "/p/leader-epoch-checkpoint" in str(caught.value)


def test_parse_refuses_a_file_above_the_bound_before_decoding_it():
    with pytest.raises(CorruptCheckpointError, match="above the"):
        parse_epochs(b"0" * (LEADER_EPOCH_CHECKPOINT_BYTES_MAX + 1))


_entries = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(0, 2**40)), max_size=30
).map(lambda steps: _increasing(steps))


def _increasing(steps: list[tuple[int, int]]) -> list[EpochEntry]:
    entries, epoch, offset = [], -1, -1
    for epoch_step, offset_step in steps:
        epoch, offset = epoch + 1 + epoch_step, offset + 1 + offset_step
        if epoch > _INT32_MAX:
            break
        entries.append(EpochEntry(epoch, offset))
    return entries


@given(_entries)
def test_round_trip_of_any_valid_entries(entries):
    assert parse_epochs(format_epochs(entries)) == entries


@settings(max_examples=300)
@given(st.one_of(
    st.binary(max_size=200),
    # Mostly-valid shapes, where a hostile file is most likely to slip through.
    st.lists(st.sampled_from([b"0", b"1", b"2", b"-1", b" ", b"\n", b"\r", b"\t", b"7 3", b"99999999999"]),
             max_size=40).map(b"".join),
))
def test_hostile_bytes_give_valid_entries_or_one_corrupt_checkpoint_error(data):
    try:
        entries = parse_epochs(data)
    except CorruptCheckpointError:
        return
    for entry in entries:
        assert 0 <= entry.epoch <= _INT32_MAX and 0 <= entry.start_offset <= _INT64_MAX
    for before, after in zip(entries, entries[1:]):
        assert after.epoch > before.epoch and after.start_offset > before.start_offset


# -- the file -----------------------------------------------------------------------------------
def test_write_then_read_the_file_is_byte_exact(tmp_path):
    checkpoint = LeaderEpochCheckpointFile(str(tmp_path))
    checkpoint.write(GOLDEN_ENTRIES)
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_bytes() == GOLDEN
    assert checkpoint.read() == GOLDEN_ENTRIES
    assert not (tmp_path / (LEADER_EPOCH_CHECKPOINT + ".tmp")).exists()


def test_a_missing_file_reads_as_no_entries(tmp_path):
    checkpoint = LeaderEpochCheckpointFile(str(tmp_path))
    assert (checkpoint.exists(), checkpoint.read()) == (False, [])


def test_a_huge_file_is_refused_after_reading_only_the_bound(tmp_path):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    with open(path, "wb") as file:
        file.truncate(LEADER_EPOCH_CHECKPOINT_BYTES_MAX * 4)  # sparse: costs no disk
    with pytest.raises(CorruptCheckpointError, match="bytes or more"):
        LeaderEpochCheckpointFile(str(tmp_path)).read()


def test_a_failed_write_leaves_the_old_file_whole(tmp_path):
    fs = FaultFs()
    checkpoint = LeaderEpochCheckpointFile(str(tmp_path), fs=fs)
    checkpoint.write(GOLDEN_ENTRIES)
    fs.fail("fsync", errno.EIO, path=LEADER_EPOCH_CHECKPOINT + ".tmp")
    with pytest.raises(OSError):
        checkpoint.write([EpochEntry(9, 9000)])
    assert checkpoint.read() == GOLDEN_ENTRIES
    assert sorted(os.listdir(tmp_path)) == [LEADER_EPOCH_CHECKPOINT]
