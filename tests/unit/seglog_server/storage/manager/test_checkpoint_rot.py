"""Checkpoints and topic.properties are bytes from outside the process: whatever they hold, reading
them raises the storage's own error (never ValueError from int() of a 5,000-digit number), and
start-up then loses no stored record: an unreadable offset checkpoint reads as empty (recovery
from scratch, every segment kept), an unreadable topic.properties keeps that partition offline
with the reason while every other partition serves."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import RecordBatchBuilder, iter_batches
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import (
    CorruptCheckpointError,
    CorruptTopicMetadataError,
    InvalidConfigError,
    LogDirOfflineError,
)
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.format.checkpoint import (
    CHECKPOINT_BYTES_MAX,
    OffsetCheckpointFile,
    RemoteDeletionCheckpointFile,
    parse_offsets,
    parse_remote_deletions,
)
from seglog_server.storage.format.topic_metadata import (
    TOPIC_METADATA_FILE_NAME,
    parse_topic_metadata,
    read_topic_metadata,
)
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals

HUGE = "9" * 5000  # int() refuses it with a plain ValueError (over 4,300 digits)
TOPIC_ID = "0123456789abcdef0123456789abcdef"

EVERY_PASS = MaintenanceIntervals(initial_delay_ms=0, retention_check_ms=0, flush_check_ms=0,
                                  recovery_point_checkpoint_ms=0, log_start_offset_checkpoint_ms=0)


def start(log_dir: str, clock: FakeClock) -> LogManager:
    manager = LogManager([log_dir], clock=clock, intervals=EVERY_PASS)
    manager.startup()
    return manager


def values(log) -> list[bytes]:
    """The values a reader from the log start sees (records of the first batch below it left out)."""
    found, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        for record_batch in iter_batches(log.read(offset, 1 << 20).records):
            found.extend(r.value for r in record_batch.records() if r.offset >= log.log_start_offset)
            offset = record_batch.last_offset + 1
    return found


def stored(tmp_path, clock, *, clean: bool = True) -> str:
    """A directory holding topics t (records a, b, c; DeleteRecords to 1) and u (record z)."""
    log_dir = str(tmp_path / "d")
    manager = start(log_dir, clock)
    manager.create_topic("t", 1)
    manager.create_topic("u", 1)
    for topic, payload in (("t", [b"a", b"b", b"c"]), ("u", [b"z"])):
        builder = RecordBatchBuilder()
        for value in payload:
            builder.append(value, timestamp_ms=clock.time_ms())
        manager.get_log(topic, 0).append(builder.build())
    manager.get_log("t", 0).delete_records(1)
    manager.run_maintenance()
    if clean:
        manager.shutdown()
    else:
        manager.halt()
    return log_dir


# -- the class: hostile text raises the storage's error, nothing else ------------------------------
_number = st.one_of(st.just(HUGE), st.just("-" + HUGE), st.from_regex(r"[+-]?[0-9]{1,40}", fullmatch=True),
                    st.sampled_from(["١٢٣", "²", "1_000", " 1", "1e400", "0x10", "NaN", "∞"]))
_field = st.one_of(_number, st.text(max_size=12), st.just("t"), st.just(TOPIC_ID))
_line = st.lists(_field, min_size=0, max_size=5).map(" ".join)
_checkpoint_text = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(_line, _number), max_size=6).map("\n".join),
    st.tuples(st.sampled_from(["0", "1"]), _number, st.lists(_line, max_size=4)).map(
        lambda parts: "\n".join([parts[0], parts[1], *parts[2]])),
)


@settings(max_examples=400, deadline=None)
@given(_checkpoint_text)
def test_hostile_checkpoint_text_raises_only_the_checkpoint_error(text):
    for parse in (parse_offsets, parse_remote_deletions):
        try:
            parsed = parse(text, "cp")
        except CorruptCheckpointError as exc:
            assert "cp" in str(exc) and len(str(exc)) < 400  # names the file, does not echo it all
        else:
            assert all(-(2**63) <= offset < 2**63 for offset in parsed.values())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=200), _checkpoint_text.map(str.encode)))
def test_hostile_checkpoint_bytes_on_disk_raise_only_the_checkpoint_error(tmp_path, data):
    path = tmp_path / "cp"
    path.write_bytes(data)
    for checkpoint in (OffsetCheckpointFile(str(path)), RemoteDeletionCheckpointFile(str(path))):
        try:
            checkpoint.read()
        except CorruptCheckpointError:
            pass


_property_value = st.one_of(_number, st.text(max_size=20), st.just(TOPIC_ID), st.just("0"))
_property_lines = st.lists(
    st.tuples(st.sampled_from(["version", "topic", "topic.id", "partition.count", "config.retention.ms",
                               "config.segment.bytes", "config.min.cleanable.dirty.ratio", "config.x"]),
              _property_value).map(lambda kv: f"{kv[0]}={kv[1]}"),
    max_size=8)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=200), _property_lines.map("\n".join),
                 _number.map(lambda n: f"version=0\ntopic=t\ntopic.id={TOPIC_ID}\npartition.count={n}")))
def test_hostile_topic_properties_raise_only_the_metadata_or_config_error(text):
    try:
        metadata = parse_topic_metadata(text, "tp")
        LogConfig.from_properties(metadata.overrides)  # what start-up does with the overrides
    except (CorruptTopicMetadataError, InvalidConfigError):
        pass


# -- what start-up does with each unreadable file: no record lost ----------------------------------
@pytest.mark.parametrize("name", ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
                                  "cleaner-offset-checkpoint", "remote-deletion-checkpoint"])
@pytest.mark.parametrize("clean", [True, False])
def test_a_huge_number_in_a_checkpoint_starts_and_keeps_every_record(tmp_path, name, clean):
    clock = FakeClock()
    log_dir = stored(tmp_path, clock, clean=clean)
    version = "1" if name == "remote-deletion-checkpoint" else "0"
    suffix = f" {TOPIC_ID}" if name == "remote-deletion-checkpoint" else ""
    with open(os.path.join(log_dir, name), "w") as f:
        f.write(f"{version}\n1\nt 0 {HUGE}{suffix}\n")
    manager = start(log_dir, clock)  # raised ValueError before: the service did not start
    statistics = manager.statistics()
    assert statistics.log_dirs[0].online
    t = manager.get_log("t", 0)
    # An unreadable log-start checkpoint keeps every segment: the record DeleteRecords hid is back.
    expected = [b"a", b"b", b"c"] if name == "log-start-offset-checkpoint" else [b"b", b"c"]
    assert values(t) == expected
    assert values(manager.get_log("u", 0)) == [b"z"]
    if name != "cleaner-offset-checkpoint":  # the cleaner reads its own file when it cleans
        assert statistics.log_dirs[0].checkpoint_read_error_count == 1
    manager.shutdown()


class _HugeFileFs(FileSystem):
    """Reports every checkpoint as one byte above the cap (a file that is not ours)."""

    def __init__(self):
        self.checkpoint_fds: set[int] = set()

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        if path.endswith("-checkpoint"):
            self.checkpoint_fds.add(fd)
        return fd

    def close(self, fd):
        self.checkpoint_fds.discard(fd)
        super().close(fd)

    def fsize(self, fd):
        return CHECKPOINT_BYTES_MAX + 1 if fd in self.checkpoint_fds else super().fsize(fd)


def test_a_checkpoint_above_the_cap_is_refused_before_it_is_read(tmp_path):
    clock = FakeClock()
    log_dir = stored(tmp_path, clock)
    with pytest.raises(CorruptCheckpointError, match="above the"):
        OffsetCheckpointFile(os.path.join(log_dir, "recovery-point-offset-checkpoint"), fs=_HugeFileFs()).read()
    manager = LogManager([log_dir], clock=clock, intervals=EVERY_PASS, fs=_HugeFileFs())
    manager.startup()
    assert manager.statistics().log_dirs[0].checkpoint_read_error_count == 2  # no remote-deletion file
    assert values(manager.get_log("t", 0)) == [b"a", b"b", b"c"]
    manager.shutdown()


@pytest.mark.parametrize("rot", [f"partition.count={HUGE}", "x" * (1 << 20)])
def test_unreadable_topic_properties_keep_that_partition_offline_and_the_others_serving(tmp_path, rot):
    clock = FakeClock()
    log_dir = stored(tmp_path, clock)
    path = os.path.join(log_dir, "t-0", TOPIC_METADATA_FILE_NAME)
    with open(path) as f:
        text = f.read()
    rotted = (text.replace("partition.count=1", rot) if rot.startswith("partition")
              else text + "# " + rot + "\n")
    with open(path, "w") as f:
        f.write(rotted)
    with pytest.raises(CorruptTopicMetadataError):
        read_topic_metadata(os.path.join(log_dir, "t-0"))
    manager = start(log_dir, clock)  # raised ValueError before: the service did not start
    with pytest.raises(LogDirOfflineError, match="unreadable topic metadata"):
        manager.get_log("t", 0)
    assert values(manager.get_log("u", 0)) == [b"z"]
    manager.shutdown()
    with open(path, "w") as f:  # the operator's fix: the partition's files were all kept
        f.write(text)
    manager = start(log_dir, clock)
    assert values(manager.get_log("t", 0)) == [b"b", b"c"]
    manager.shutdown()


def test_the_documented_fix_of_a_log_start_line_removes_the_line_and_lowers_the_count():
    from seglog_server.storage.base.topic_partition import TopicPartition
    from seglog_server.storage.format.checkpoint import format_offsets, parse_offsets

    text = format_offsets({TopicPartition("rot", 0): 910, TopicPartition("ok", 0): 5}).decode()
    without_line = text.replace("rot 0 910\n", "")
    with pytest.raises(CorruptCheckpointError):  # the line alone removed: the file is unreadable
        parse_offsets(without_line)
    fixed = without_line.replace("\n2\n", "\n1\n", 1)  # docs/reliability.md: the count lowered too
    assert parse_offsets(fixed) == {TopicPartition("ok", 0): 5}
