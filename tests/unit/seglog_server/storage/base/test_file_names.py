"""Segment file names: 20-digit offsets and life-cycle suffixes."""

from __future__ import annotations

import pytest

from seglog_server.storage.base import file_names as fn


def test_prefix_is_the_offset_zero_padded_to_twenty_digits():
    assert fn.filename_prefix(0) == "00000000000000000000"
    assert fn.filename_prefix(45) == "00000000000000000045"
    assert fn.filename_prefix(2**63 - 1) == "09223372036854775807"


def test_paths_append_kind_and_suffix_to_the_whole_name():
    assert fn.log_path("/d", 45) == "/d/00000000000000000045.log"
    assert fn.offset_index_path("/d", 45) == "/d/00000000000000000045.index"
    assert fn.time_index_path("/d", 45) == "/d/00000000000000000045.timeindex"
    assert fn.log_path("/d", 45, fn.SWAP_SUFFIX) == "/d/00000000000000000045.log.swap"


@pytest.mark.parametrize(
    "name, offset",
    [
        ("00000000000000000045.log", 45),
        ("00000000000000000045.index.deleted", 45),
        ("/x/00000000000000001000.timeindex.swap", 1000),
        ("00000000000000000007.snapshot", 7),
    ],
)
def test_offset_from_name_reads_the_text_before_the_first_dot(name, offset):
    assert fn.offset_from_name(name) == offset


def test_offset_from_name_rejects_names_without_an_offset():
    with pytest.raises(ValueError, match="does not start with an offset"):
        fn.offset_from_name("leader-epoch-checkpoint")


def test_kind_checks_ignore_files_with_life_cycle_suffixes():
    assert fn.is_log_file("00000000000000000000.log")
    assert not fn.is_log_file("00000000000000000000.log.swap")
    assert fn.is_index_file("00000000000000000000.index")
    assert fn.is_index_file("00000000000000000000.timeindex")
    assert not fn.is_index_file("00000000000000000000.index.cleaned")


def test_replace_suffix():
    assert fn.replace_suffix("/d/a.log", "", ".deleted") == "/d/a.log.deleted"
    assert fn.replace_suffix("/d/a.log.swap", ".swap", "") == "/d/a.log"
    assert fn.replace_suffix("/d/a.log.cleaned", ".cleaned", ".swap") == "/d/a.log.swap"
    with pytest.raises(ValueError):
        fn.replace_suffix("/d/a.log", ".swap", "")
