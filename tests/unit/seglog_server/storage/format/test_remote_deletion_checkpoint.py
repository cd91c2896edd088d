"""remote-deletion-checkpoint: deleted tiered partitions with their topic ids (the store keys a
partition's objects by them), version 1; a version 0 file (no ids) is refused, never guessed at."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog_server.storage.base.topic_partition import TopicIdPartition
from seglog_server.storage.format.checkpoint import (
    CorruptCheckpointError,
    RemoteDeletionCheckpointFile,
    format_remote_deletions,
    parse_remote_deletions,
)

_ENTRIES = st.dictionaries(
    st.builds(TopicIdPartition, st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True),
              st.integers(0, 99_999), st.from_regex(r"[0-9a-f]{32}", fullmatch=True)),
    st.integers(-(2**63), 2**63 - 1), max_size=6)


@given(_ENTRIES)
def test_round_trip(entries):
    assert parse_remote_deletions(format_remote_deletions(entries).decode()) == entries


def test_a_file_without_topic_ids_is_refused_as_corrupt():
    with pytest.raises(CorruptCheckpointError, match="unrecognised version 0"):
        parse_remote_deletions("0\n1\nt 0 1700000000000\n")


@pytest.mark.parametrize("line", ["t 0 1", "t 0 1 nothex", "t 0 1 " + "A" * 32, "t -1 1 " + "a" * 32])
def test_a_malformed_entry_is_corrupt(line):
    with pytest.raises(CorruptCheckpointError, match="malformed line"):
        parse_remote_deletions(f"1\n1\n{line}\n")


def test_the_file_writes_and_reads_back(tmp_path):
    file = RemoteDeletionCheckpointFile(str(tmp_path / "remote-deletion-checkpoint"))
    assert file.read() == {}
    entries = {TopicIdPartition("t", 3, "ab" * 16): 17}
    file.write(entries)
    assert (tmp_path / "remote-deletion-checkpoint").read_text() == f"1\n1\nt 3 17 {'ab' * 16}\n"
    assert file.read() == entries
