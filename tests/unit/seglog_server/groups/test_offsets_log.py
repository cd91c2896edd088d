"""Committed offsets in the real storage engine's compacted ``__consumer_offsets`` topic: the live
map equals a replay of the log, before and after the single-process cleaner has compacted it and
after a restart of the log manager; tombstones delete; groups that stay empty expire after
offsets.retention.minutes (FakeClock), their metadata with them; a failed append changes nothing."""

from __future__ import annotations

import contextlib
import errno
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import iter_batches
from seglog_server.groups.errors import CorruptGroupRecordError
from seglog_server.groups.offsets_log import OFFSETS_TOPIC, OffsetsLog
from seglog_server.groups.offsets_state import OFFSETS_RETENTION_MS, OffsetsState
from seglog_server.groups.partitioning import partition_for
from seglog_server.groups.records import (
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    encode_key,
)
from seglog_server.storage import FakeClock, LogManager
from seglog_server.storage.base.errors import LogDirOfflineError, NotCleanableError, StorageError
from seglog_spark.cleaner_local import clean_snapshot
from tests.support.fault_fs import FaultFs

PARTITIONS = 3  # few partitions keep each example fast; the rule is the same for 50
MEMBER = MemberMetadata("m1", "client", "/127.0.0.1", 45000, 300000)
SMALL_MAP = 1 << 14


@contextlib.contextmanager
def running(directory: str, clock: FakeClock):
    manager = LogManager([directory], clock=clock)
    manager.startup()
    try:
        yield manager
    finally:
        manager.shutdown()


def loaded(manager: LogManager, clock: FakeClock) -> OffsetsLog:
    offsets = OffsetsLog(manager, clock, partitions=PARTITIONS)
    offsets.ensure_topic()
    offsets.load()
    return offsets


def flushed(offsets: OffsetsLog) -> None:
    """Every appended offset record made durable: a commit reaches the map only then (the rpc
    layer answers once it is)."""
    for log, end_offset in offsets.undurable_ends():
        log.flush(end_offset)


def commit(offsets: OffsetsLog, group: str, values) -> None:
    offsets.commit(group, values)
    flushed(offsets)


def delete_offsets(offsets: OffsetsLog, group: str, topic_partitions) -> None:
    offsets.delete_offsets(group, topic_partitions)
    flushed(offsets)


def expire(offsets: OffsetsLog, **kwargs) -> int:
    written = offsets.expire(**kwargs)
    flushed(offsets)
    return written


def everything(offsets: OffsetsLog) -> list[dict]:
    return [offsets.state(p).as_dict() for p in range(offsets.partition_count)]


def clean_all(manager: LogManager) -> int:
    """Rolls and cleans every partition with the single-process engine; returns how many were."""
    cleaned = 0
    for partition in range(PARTITIONS):
        manager.get_log(OFFSETS_TOPIC, partition).roll()
        try:
            taken = manager.create_snapshot(OFFSETS_TOPIC, partition)
        except NotCleanableError:
            continue
        clean_snapshot(taken.path, map_bytes=SMALL_MAP)
        manager.commit_cleaned(taken.manifest.snapshot_id)
        cleaned += 1
    return cleaned


def record_count(manager: LogManager) -> int:
    total = 0
    for partition in range(PARTITIONS):
        log = manager.get_log(OFFSETS_TOPIC, partition)
        data = log.read(log.log_start_offset, 1 << 24).records
        total += sum(batch.records_count for batch in iter_batches(data))
    return total


def test_a_commit_is_served_and_survives_a_restart(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        commit(offsets, "g", {("t", 0): 5, ("t", 1): OffsetCommitValue(9, 1, "meta", leader_epoch=3)})
        commit(offsets, "g", {("t", 0): 7})
        assert offsets.committed("g", "t", 0) == OffsetCommitValue(7, clock.time_ms())
        live = everything(offsets)
    with running(str(tmp_path), clock) as manager:
        assert everything(loaded(manager, clock)) == live
        assert loaded(manager, clock).committed("g", "t", 1).metadata == "meta"


def test_the_records_are_kafkas_keys_in_the_groups_partition(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        commit(offsets, "hello", {("t", 4): 1})
        log = manager.get_log(OFFSETS_TOPIC, partition_for("hello", PARTITIONS))
        [record] = next(iter_batches(log.read(0, 1 << 20).records)).records()
        assert decode_key(record.key) == OffsetCommitKey("hello", "t", 4)
        assert record.key == bytes.fromhex("0001" "0005") + b"hello" + bytes.fromhex("0001") + b"t" + bytes.fromhex("00000004")


def test_a_tombstone_deletes_the_offset_in_the_map_and_after_a_replay(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        commit(offsets, "g", {("t", 0): 5, ("t", 1): 6})
        delete_offsets(offsets, "g", [("t", 0)])
        assert offsets.committed("g", "t", 0) is None
        assert set(offsets.state_of("g").group_offsets("g")) == {("t", 1)}
        assert everything(loaded(manager, clock)) == everything(offsets)


def test_offsets_of_an_empty_group_expire_after_the_retention_and_the_group_with_them(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        offsets.store_group("g", GroupMetadataValue("consumer", 3, None, None, clock.time_ms(), ()))
        commit(offsets, "g", {("t", 0): 5})
        commit(offsets, "standalone", {("t", 0): 1})
        clock.advance(OFFSETS_RETENTION_MS - 1)
        assert expire(offsets) == 0
        clock.advance(1)
        assert expire(offsets) == 3  # two offsets and g's metadata
        assert offsets.state_of("g").groups() == [] and offsets.committed("standalone", "t", 0) is None
        assert everything(loaded(manager, clock)) == everything(offsets)


def test_an_offset_or_group_with_a_commit_not_yet_durable_does_not_expire(tmp_path):
    """The map holds durable records only: expiry leaves an offset whose new commit (or whose
    tombstone) waits for its flush, and an empty group holding such a record keeps its metadata;
    once durable, the new commit and the metadata are there, in the map and the replay."""
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        offsets.store_group("g", GroupMetadataValue("consumer", 3, None, None, clock.time_ms(), ()))
        commit(offsets, "g", {("t", 0): 5, ("t", 1): 6})
        clock.advance(OFFSETS_RETENTION_MS)
        offsets.commit("g", {("t", 1): 60})  # appended, its flush under way
        offsets.delete_offsets("g", [("t", 0)])  # the same
        assert expire(offsets) == 0  # both offsets wait, and g's metadata with them
        assert offsets.state_of("g").group_offsets("g") == {("t", 1): OffsetCommitValue(60, clock.time_ms())}
        assert offsets.state_of("g").group_metadata("g") is not None
        assert everything(loaded(manager, clock)) == everything(offsets)
        clock.advance(OFFSETS_RETENTION_MS)
        assert expire(offsets) == 2  # nothing waits now: t-1 expires, g's metadata with it
        assert offsets.state_of("g").groups() == []


def test_a_group_with_members_or_live_in_the_coordinator_keeps_its_offsets(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        offsets.store_group("stable", GroupMetadataValue("consumer", 1, "range", "m1", clock.time_ms(), (MEMBER,)))
        commit(offsets, "stable", {("t", 0): 5})
        commit(offsets, "live", {("t", 0): 5})
        clock.advance(2 * OFFSETS_RETENTION_MS)
        assert expire(offsets, live_groups={"live"}) == 0


def test_an_empty_group_expires_from_when_it_became_empty_not_from_its_commits(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        commit(offsets, "g", {("t", 0): 5})
        clock.advance(OFFSETS_RETENTION_MS)
        offsets.store_group("g", GroupMetadataValue("consumer", 2, None, None, clock.time_ms(), ()))
        assert expire(offsets) == 0  # empty only since now
        clock.advance(OFFSETS_RETENTION_MS)
        assert expire(offsets) == 2


def test_a_commit_with_an_expire_timestamp_expires_then(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        commit(offsets, "g", {("t", 0): OffsetCommitValue(5, clock.time_ms(), expire_timestamp_ms=clock.time_ms() + 10)})
        clock.advance(10)
        assert expire(offsets) == 1


def test_a_failed_append_leaves_the_map_unchanged(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        commit(offsets, "g", {("t", 0): 5})
        before = everything(offsets)
        manager.get_log(OFFSETS_TOPIC, partition_for("g", PARTITIONS)).close()
        with pytest.raises(StorageError, match="is closed"):
            commit(offsets, "g", {("t", 0): 6})
        assert everything(offsets) == before


def test_a_corrupt_value_in_the_log_fails_the_load_naming_its_offset(tmp_path):
    from seglog.records import RecordBatchBuilder

    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        commit(offsets, "g", {("t", 0): 5})
        builder = RecordBatchBuilder()
        builder.append(b"\x00\x03\x00", key=encode_key(OffsetCommitKey("g", "t", 0)), timestamp_ms=1)
        manager.get_log(OFFSETS_TOPIC, partition_for("g", PARTITIONS)).append(builder.build())
        with pytest.raises(CorruptGroupRecordError, match="offset commit value of"):
            loaded(manager, clock)


def test_unknown_record_types_are_skipped_at_load(tmp_path):
    from seglog.records import RecordBatchBuilder

    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        loaded(manager, clock)
        builder = RecordBatchBuilder()
        builder.append(b"\x00\x00", key=b"\x00\x09\x00\x01g", timestamp_ms=1)  # a type past KIP-848's
        manager.get_log(OFFSETS_TOPIC, 0).append(builder.build())
        assert loaded(manager, clock).state(0).statistics().unknown_records_skipped == 1


def test_the_topic_must_keep_its_partition_count(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        loaded(manager, clock)
        with pytest.raises(ValueError, match="has 3 partitions, the coordinator expects 5"):
            OffsetsLog(manager, clock, partitions=5).ensure_topic()


# -- the property: live map == replay == replay of the cleaned log == after a restart ------------

GROUPS = ("g0", "g1", "g2", "hello")
topic_partitions = st.tuples(st.sampled_from(("a", "b")), st.integers(0, 2))
operations = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.dictionaries(topic_partitions, st.integers(0, 10**6),
                                                                           min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS), st.lists(topic_partitions, min_size=1, max_size=2)),
    st.tuples(st.just("group"), st.sampled_from(GROUPS), st.booleans()),  # with members or empty
    st.tuples(st.just("forget"), st.sampled_from(GROUPS), st.none()),  # the group's metadata tombstone
    st.tuples(st.just("advance"), st.none(), st.integers(0, 2 * OFFSETS_RETENTION_MS)),
    st.tuples(st.just("expire"), st.none(), st.none()),
    st.tuples(st.just("clean"), st.none(), st.none()),
), max_size=25)


def run(offsets: OffsetsLog, manager: LogManager, clock: FakeClock, operation) -> None:
    kind, group, argument = operation
    if kind == "commit":
        commit(offsets, group, argument)
    elif kind == "delete":
        delete_offsets(offsets, group, argument)
    elif kind == "group":
        members = (MEMBER,) if argument else ()
        offsets.store_group(group, GroupMetadataValue("consumer", 1, None, None, clock.time_ms(), members))
    elif kind == "forget":
        offsets.store_group(group, None)
    elif kind == "advance":
        clock.advance(argument)
    elif kind == "expire":
        expire(offsets)
    else:
        clean_all(manager)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=operations)
def test_replaying_the_cleaned_log_gives_the_live_map(operations):
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as directory:
        with running(directory, clock) as manager:
            offsets = loaded(manager, clock)
            for operation in operations:
                run(offsets, manager, clock, operation)
            live = everything(offsets)
            assert everything(loaded(manager, clock)) == live
            clean_all(manager)
            assert everything(loaded(manager, clock)) == live
        with running(directory, clock) as manager:
            assert everything(loaded(manager, clock)) == live


def test_cleaning_shrinks_the_log_and_keeps_the_map(tmp_path):
    clock = FakeClock()
    with running(str(tmp_path), clock) as manager:
        offsets = loaded(manager, clock)
        for offset in range(50):
            commit(offsets, "g", {("t", 0): offset, ("t", 1): offset})
        live = everything(offsets)
        before = record_count(manager)
        assert clean_all(manager) == 1
        assert record_count(manager) < before
        assert everything(loaded(manager, clock)) == live


# -- created lazily, once -------------------------------------------------------------------------


class CountingManager(LogManager):
    """The real engine, whose topic creations are counted and slowed so that racers overlap."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.created: list[str] = []

    def create_topic(self, topic, *args, **kwargs):
        self.created.append(topic)
        time.sleep(0.2)  # every racer reaches its check while the first creation runs
        return super().create_topic(topic, *args, **kwargs)


def test_open_creates_nothing_and_the_first_commit_creates_the_topic(tmp_path):
    clock = FakeClock(1_000_000)
    with running(str(tmp_path), clock) as manager:
        offsets = OffsetsLog(manager, clock, partitions=PARTITIONS)
        assert offsets.open() is False and not offsets.created
        assert OFFSETS_TOPIC not in [name for name, _ in manager.list_topics()]
        assert offsets.committed("g", "t", 0) is None and everything(offsets) == [OffsetsState().as_dict()] * PARTITIONS
        commit(offsets, "g", {("t", 0): 5})
        assert offsets.created and len(manager.describe_topic(OFFSETS_TOPIC).partitions) == PARTITIONS
    with running(str(tmp_path), clock) as manager:
        again = OffsetsLog(manager, clock, partitions=PARTITIONS)
        assert again.open() is True and again.committed("g", "t", 0).offset == 5


def test_concurrent_first_creators_create_the_topic_once(tmp_path):
    racers = 6
    clock = FakeClock(1_000_000)
    manager = CountingManager([str(tmp_path)], clock=clock)
    manager.startup()
    try:
        offsets = OffsetsLog(manager, clock, partitions=PARTITIONS)
        offsets.open()
        # As the coordinator calls it: ensure_created by every racer at once (outside its lock),
        # then the commit and its flush under one lock (OffsetsLog's own state has no other).
        coordinator_lock = threading.Lock()

        def first_commit(i: int) -> None:
            offsets.ensure_created()
            with coordinator_lock:
                commit(offsets, f"g{i}", {("t", 0): i})

        with ThreadPoolExecutor(racers) as pool:
            list(pool.map(first_commit, range(racers)))
        assert manager.created == [OFFSETS_TOPIC]
        assert [offsets.committed(f"g{i}", "t", 0).offset for i in range(racers)] == list(range(racers))
    finally:
        manager.shutdown()


def test_a_topic_created_meanwhile_by_another_coordinator_is_taken_when_its_count_matches(tmp_path):
    clock = FakeClock(1_000_000)
    manager = CountingManager([str(tmp_path)], clock=clock)
    manager.startup()
    try:
        both = [OffsetsLog(manager, clock, partitions=PARTITIONS) for _ in range(2)]
        for offsets in both:
            offsets.open()
        with ThreadPoolExecutor(2) as pool:  # both create; the later one finds TopicExistsError
            list(pool.map(lambda o: o.commit("g", {("t", 0): 1}), both))
        assert manager.created == [OFFSETS_TOPIC] * 2 and all(o.created for o in both)
        with pytest.raises(ValueError, match="has 3 partitions, the coordinator expects 4"):
            OffsetsLog(manager, clock, partitions=PARTITIONS + 1).open()
    finally:
        manager.shutdown()


@pytest.mark.parametrize("operation", ["pwritev", "pread"])
def test_an_io_error_on_the_offsets_partition_takes_its_directory_offline(tmp_path, operation):
    """As rpc/service_core.log_call does for any other partition: the commit (pwritev) or the
    replay at load (pread) meeting EIO on __consumer_offsets tells the storage, whose directory
    goes offline; the error is raised to the caller."""
    clock = FakeClock()
    fs = FaultFs()
    directory = str(tmp_path / "d")
    manager = LogManager([directory], clock=clock, fs=fs)
    manager.startup()
    try:
        offsets = loaded(manager, clock)
        commit(offsets, "g", {("t", 0): 5})
        partition = partition_for("g", PARTITIONS)
        manager.get_log(OFFSETS_TOPIC, partition).roll()  # the replay reads a closed segment's file
        rule = fs.fail(operation, errno.EIO, path=f"{OFFSETS_TOPIC}-{partition}", times=None)
        with pytest.raises(LogDirOfflineError):
            if operation == "pwritev":
                commit(offsets, "g", {("t", 0): 6})
            else:
                offsets.load_partition(partition)
        assert rule.hits >= 1
        [log_dir] = manager.statistics().log_dirs
        assert not log_dir.online
        with pytest.raises(StorageError):
            manager.get_log("__consumer_offsets", (partition + 1) % PARTITIONS)  # the whole directory
    finally:
        fs.heal()
        manager.shutdown()
