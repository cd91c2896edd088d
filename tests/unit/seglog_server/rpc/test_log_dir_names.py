"""Log directories leave the service by index and name, never by path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog_server.rpc.log_dir_names import LogDirNames

NAMES = LogDirNames(["/var/lib/seglog/data0", "/var/lib/seglog/data1", "/var/lib/seglog/data1/x"])


def test_a_data_dir_is_its_index_and_name():
    assert NAMES.label("/var/lib/seglog/data1") == "log dir #1 (data1)"
    assert NAMES.label("/var/lib/seglog/data0/events-0") == "log dir #0 (data0)/events-0"


def test_a_nested_data_dir_is_named_as_itself():
    assert NAMES.label("/var/lib/seglog/data1/x/t-0") == "log dir #2 (x)/t-0"


def test_a_message_keeps_the_partition_and_file_but_not_the_path():
    text = ("/var/lib/seglog/data0/events-3/00000000000000000000.log: batch at position 12 has "
            "length -20")
    assert NAMES.redact(text) == ("log dir #0 (data0)/events-3/00000000000000000000.log: batch at "
                                  "position 12 has length -20")


def test_a_path_outside_every_data_dir_is_reduced_to_its_last_component():
    assert NAMES.label("/etc/passwd") == "passwd"


def test_a_relative_data_dir_is_known_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = LogDirNames(["./data"])
    assert names.redact(f"cannot open {tmp_path}/data/t-0") == "cannot open log dir #0 (data)/t-0"


@given(st.sampled_from(["/var/lib/seglog/data0", "/var/lib/seglog/data1"]),
       st.text(alphabet=st.characters(blacklist_characters="/"), max_size=20),
       st.text(alphabet=st.characters(blacklist_characters="/"), max_size=30))
def test_no_data_dir_path_survives_redaction(directory, partition, before):
    redacted = NAMES.redact(f"{before}{directory}/{partition} failed")
    assert "/var/lib/seglog" not in redacted
