"""Offset checkpoint files: Kafka's text format, lenient reading, atomic writing."""

import os

import pytest

from seglog_server.storage.format.checkpoint import (
    CorruptCheckpointError,
    OffsetCheckpointFile,
    format_offsets,
    parse_offsets,
)
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.base.topic_partition import TopicPartition as TP

# Golden text as Kafka writes it: version, count, one "<topic> <partition> <offset>" per line.
GOLDEN = b"0\n3\nmy-topic 0 1234\nmy-topic 1 77\nother 0 5\n"
GOLDEN_OFFSETS = {TP("my-topic", 0): 1234, TP("my-topic", 1): 77, TP("other", 0): 5}


def test_format_writes_kafkas_golden_text():
    assert format_offsets(GOLDEN_OFFSETS) == GOLDEN


def test_format_of_no_offsets_is_version_and_zero():
    assert format_offsets({}) == b"0\n0\n"


def test_format_is_independent_of_insertion_order():
    reversed_offsets = dict(reversed(list(GOLDEN_OFFSETS.items())))
    assert format_offsets(reversed_offsets) == GOLDEN


def test_parse_reads_the_golden_text():
    assert parse_offsets(GOLDEN.decode()) == GOLDEN_OFFSETS


def test_parse_accepts_any_whitespace_run_between_fields():
    text = "0\n2\nt \t 0\t\t9\nu   3  -1   \n"
    assert parse_offsets(text) == {TP("t", 0): 9, TP("u", 3): -1}


def test_parse_accepts_crlf_and_a_missing_final_newline():
    assert parse_offsets("0\r\n1\r\nt 0 5") == {TP("t", 0): 5}


@pytest.mark.parametrize("text", ["", "0", "0\n"])
def test_parse_of_empty_or_countless_file_is_empty(text):
    assert parse_offsets(text) == {}


def test_parse_keeps_the_last_of_duplicate_entries():
    assert parse_offsets("0\n2\nt 0 5\nt 0 9\n") == {TP("t", 0): 9}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\n0\n", "unrecognised version 1"),
        ("x\n", "malformed line"),
        (" 0\n0\n", "malformed line"),  # Integer.parseInt refuses spaces
        ("0\nten\n", "malformed line"),
        ("0\n1\nt 0\n", "malformed line"),
        ("0\n1\nt 0 1 2\n", "malformed line"),
        ("0\n1\n t 0 1\n", "malformed line"),  # a leading space makes an empty first field
        ("0\n1\nt zero 1\n", "malformed line"),
        ("0\n1\nt 0 1_000\n", "malformed line"),  # Python int() would take it, Kafka does not
        ("0\n1\nt 0 9223372036854775808\n", "malformed line"),  # beyond int64
        ("0\n1\nt 2147483648 0\n", "malformed line"),  # beyond int32
        ("0\n1\n\n", "malformed line"),
        ("0\n2\nt 0 1\n", "expected 2 entries"),
        ("0\n1\nt 0 1\nt 1 1\n", "expected 1 entries"),
    ],
)
def test_parse_refuses_malformed_content(text, message):
    with pytest.raises(CorruptCheckpointError, match=message):
        parse_offsets(text, "/x/recovery-point-offset-checkpoint")


def test_error_names_the_file_and_the_line():
    with pytest.raises(CorruptCheckpointError) as info:
        parse_offsets("0\n1\nbad line here now\n", "/data/recovery-point-offset-checkpoint")
    assert "/data/recovery-point-offset-checkpoint" in str(info.value)
    assert "bad line here now" in str(info.value)


def test_file_round_trips_offsets(tmp_path):
    checkpoint = OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint"))
    checkpoint.write(GOLDEN_OFFSETS)
    assert checkpoint.read() == GOLDEN_OFFSETS
    assert (tmp_path / "recovery-point-offset-checkpoint").read_bytes() == GOLDEN


def test_missing_file_reads_as_empty(tmp_path):
    assert OffsetCheckpointFile(str(tmp_path / "absent")).read() == {}


def test_non_utf8_file_is_corrupt(tmp_path):
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\n\xff\xfe 0 1\n")
    with pytest.raises(CorruptCheckpointError, match="not UTF-8"):
        OffsetCheckpointFile(str(path)).read()


def test_kafka_written_file_with_hash_map_order_reads_back(tmp_path):
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_bytes(b"0\n2\nzeta 4 100\nalpha 0 7\n")
    assert OffsetCheckpointFile(str(path)).read() == {TP("zeta", 4): 100, TP("alpha", 0): 7}


def test_write_leaves_no_tmp_file_behind(tmp_path):
    checkpoint = OffsetCheckpointFile(str(tmp_path / "cp"))
    checkpoint.write({TP("t", 0): 1})
    checkpoint.write({TP("t", 0): 2})
    assert sorted(os.listdir(tmp_path)) == ["cp"]


class _RecordingFs(FileSystem):
    def __init__(self):
        self.calls = []

    def fsync(self, fd):
        self.calls.append("fsync")
        super().fsync(fd)

    def replace(self, src, dst):
        self.calls.append(("replace", os.path.basename(src), os.path.basename(dst)))
        super().replace(src, dst)

    def fsync_dir(self, path):
        self.calls.append("fsync_dir")
        super().fsync_dir(path)


def test_write_is_tmp_fsync_rename_then_dir_fsync(tmp_path):
    fs = _RecordingFs()
    OffsetCheckpointFile(str(tmp_path / "cp"), fs=fs).write({TP("t", 0): 1})
    assert fs.calls == ["fsync", ("replace", "cp.tmp", "cp"), "fsync_dir"]


class _FailingFsyncFs(FileSystem):
    def fsync(self, fd):
        raise OSError(5, "Input/output error")


def test_failed_write_keeps_the_previous_content(tmp_path):
    path = str(tmp_path / "cp")
    OffsetCheckpointFile(path).write({TP("t", 0): 1})
    with pytest.raises(OSError):
        OffsetCheckpointFile(path, fs=_FailingFsyncFs()).write({TP("t", 0): 2})
    assert OffsetCheckpointFile(path).read() == {TP("t", 0): 1}
