"""``UnifiedLog.read_appended``: the batch an append announced (``AppendedBatch``) answers a read
at its base offset exactly as the log would (the bytes on disk, the high watermark, the log start,
the next offset), whatever the reader's max_bytes, and only while nothing else changed the log;
in every other case it answers None and the reader reads the log. A Hypothesis property over
sequences of appends, rolls, truncations and DeleteRecords, and each fall-back case driven."""

from __future__ import annotations

import tempfile
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, FailingFs, batch, open_log

from seglog.records import Compression, TimestampType
from seglog.records.header_patch import set_max_timestamp
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import FencedLeaderEpochError, LogDirOfflineError, OffsetOutOfRangeError
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.log.unified_log import AppendedBatch

_MAX_BYTES = (1, 60, 4096, 1 << 20)


class Told:
    """The change listener: keeps every AppendedBatch an append told."""

    def __init__(self) -> None:
        self.appended: list[AppendedBatch] = []
        self.plain = 0

    def __call__(self, topic: str, partition: int, *appended: AppendedBatch) -> None:
        if appended:
            self.appended.extend(appended)
        else:
            self.plain += 1


def _told_log(directory: str, clock: FakeClock, **kwargs):
    log = open_log(directory, clock, **kwargs)
    told = Told()
    log.set_change_listener(told)
    return log, told


def _read_or_error(log, offset: int, max_bytes: int):
    try:
        return log.read(offset, max_bytes)
    except OffsetOutOfRangeError as exc:
        return type(exc)


def _values(count: int, size: int) -> list[bytes]:
    return [bytes([65 + index % 26]) * size for index in range(count)]


_OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 6), st.integers(0, 250), st.sampled_from([None, 2, 5]),
              st.booleans()),
    st.tuples(st.just("roll")),
    st.tuples(st.just("truncate"), st.integers(0, 40)),
    st.tuples(st.just("delete"), st.integers(0, 40)),
    st.tuples(st.just("read_between"), st.integers(0, 40)),
)


@settings(max_examples=120, deadline=None)
@given(ops=st.lists(_OPS, min_size=1, max_size=14))
def test_an_appended_batch_answers_as_the_log_reads_or_not_at_all(ops):
    clock = FakeClock(NOW_MS)
    with tempfile.TemporaryDirectory() as directory:
        log, told = _told_log(directory, clock, log_config=LogConfig(segment_bytes=2000))
        try:
            last_op_appended = False
            for op in ops:
                last_op_appended = False
                if op[0] == "append":
                    _, count, size, epoch, compressed = op
                    compression = Compression.GZIP if compressed else Compression.NONE
                    try:
                        log.append(batch(*_values(count, size), compression=compression), leader_epoch=epoch)
                    except FencedLeaderEpochError:
                        continue  # refused, nothing written nor told
                    last_op_appended = True
                elif op[0] == "roll":
                    log.roll()
                elif op[0] == "truncate":
                    log.truncate_to(op[1])
                elif op[0] == "delete":
                    log.delete_records(min(op[1], log.high_watermark))
                else:
                    _read_or_error(log, min(op[1], log.high_watermark), 4096)
                # Every batch ever told, at its base offset and next to it: the log's own answer
                # for every max_bytes, or None.
                for appended in told.appended:
                    for offset in (appended.base_offset, appended.base_offset + 1):
                        served = log.read_appended(appended, offset)
                        if served is None:
                            continue
                        assert offset == appended.base_offset
                        for max_bytes in _MAX_BYTES:
                            assert served == log.read(offset, max_bytes)
            if last_op_appended:  # the batch just appended is served from the append
                newest = told.appended[-1]
                assert log.read_appended(newest, newest.base_offset) is not None
        finally:
            log.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


@pytest.fixture
def told_log(tmp_path, clock):
    log, told = _told_log(tmp_path / "t-0", clock)
    yield log, told
    log.close()


def test_the_append_tells_the_batch_as_written_and_it_answers_for_the_log(told_log):
    log, told = told_log
    log.append(batch(b"a", b"b"))
    log.append(batch(b"c"), leader_epoch=4)  # the partitionLeaderEpoch stamped over the producer's
    appended = told.appended[-1]
    assert (appended.base_offset, appended.end_offset) == (2, 3)
    served = log.read_appended(appended, 2)
    assert served == log.read(2, 1) and served.records == log.read(2, 1 << 20).records
    assert served.next_offset == 3 and served.high_watermark == 3


def test_another_append_since_falls_back(told_log):
    log, told = told_log
    log.append(batch(b"a"))
    log.append(batch(b"b"))
    assert log.read_appended(told.appended[0], 0) is None  # the read answers both batches
    assert log.read_appended(told.appended[1], 1) is not None


def test_a_roll_since_falls_back(told_log):
    log, told = told_log
    log.append(batch(b"a"))
    log.roll()
    assert log.read_appended(told.appended[0], 0) is None


def test_a_truncation_and_an_append_to_the_same_end_fall_back(told_log):
    log, told = told_log
    log.append(batch(b"a"))
    log.append(batch(b"old"))
    log.truncate_to(1)
    log.append(batch(b"new"))  # the same offsets, other bytes
    old, new = told.appended[1], told.appended[2]
    assert (old.base_offset, new.base_offset) == (1, 1)
    assert log.read_appended(old, 1) is None
    assert log.read_appended(new, 1) == log.read(1, 4096)


def test_the_log_start_moved_past_it_falls_back(told_log):
    log, told = told_log
    log.append(batch(b"a", b"b"))
    log.delete_records(1)
    assert log.read_appended(told.appended[0], 0) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 4096)


def test_an_offset_inside_the_batch_falls_back(told_log):
    log, told = told_log
    log.append(batch(b"a", b"b", b"c"))
    assert log.read_appended(told.appended[0], 1) is None
    assert log.read_appended(told.appended[0], 0) is not None


def test_another_logs_batch_falls_back(tmp_path, clock, told_log):
    log, told = told_log
    other, other_told = _told_log(tmp_path / "t-1", clock)
    try:
        log.append(batch(b"a"))
        other.append(batch(b"a"))
        assert other.read_appended(told.appended[0], 0) is None
        assert log.read_appended(other_told.appended[0], 0) is None
    finally:
        other.close()


def test_an_offline_log_falls_back_and_its_read_raises(tmp_path, clock):
    fs = FailingFs()
    log, told = _told_log(tmp_path / "t-2", clock, fs=fs)
    try:
        log.append(batch(b"a"))
        log.append(batch(b"b"))
        fs.fail = 1
        with pytest.raises(LogDirOfflineError):
            log.read(0, 1)  # a failed read takes the log offline
        assert log.read_appended(told.appended[1], 1) is None
        with pytest.raises(LogDirOfflineError):
            log.read(1, 4096)
    finally:
        log.close()


def test_a_closed_log_falls_back(tmp_path, clock):
    log, told = _told_log(tmp_path / "t-3", clock)
    log.append(batch(b"a"))
    log.close()
    assert log.read_appended(told.appended[0], 0) is None


def test_a_busy_lock_falls_back_without_waiting(told_log):
    log, told = told_log
    log.append(batch(b"a"))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with log._lock:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        held.wait()
        assert log.read_appended(told.appended[0], 0) is None
    finally:
        release.set()
        holder.join()
    assert log.read_appended(told.appended[0], 0) is not None


def test_a_batch_in_a_mutable_buffer_is_announced_without_its_bytes(told_log):
    log, told = told_log
    log.append(bytearray(batch(b"a")))  # its owner could change it after the append
    assert told.appended == [] and told.plain == 1


def _rewritten_max_timestamp(records: bytes) -> bytes:
    """``records`` with a maxTimestamp below its records' own (the CRC made good): the validator
    writes the right one into a copy, as Kafka does."""
    copy = bytearray(records)
    set_max_timestamp(copy, TimestampType.CREATE_TIME, NOW_MS - 5)
    return bytes(copy)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
@pytest.mark.parametrize("case", ["log_append_time", "max_timestamp_rewritten"])
def test_a_batch_the_validator_rewrote_is_announced_without_its_bytes(tmp_path, clock, case, compression):
    config = (LogConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME) if case == "log_append_time"
              else LogConfig())
    log, told = _told_log(tmp_path / "t-4", clock, log_config=config)
    try:
        records = batch(b"a", b"b", compression=compression)
        if case == "max_timestamp_rewritten":
            records = _rewritten_max_timestamp(records)
        log.append(records)
        assert told.appended == [] and told.plain == 1  # readers read the rewritten batch from the log
        assert log.read(0, 4096).records[8:] != records[8:]  # the log holds the rewritten copy
        log.append(batch(b"c", compression=compression))
        if case == "log_append_time":  # every batch stamped: none announced with its bytes
            assert told.appended == [] and told.plain == 2
        else:  # a batch as sent: announced with the request's own bytes
            assert [appended.base_offset for appended in told.appended] == [2]
            assert log.read_appended(told.appended[0], 2) == log.read(2, 4096)
    finally:
        log.close()


class _JoinWatched(AppendedBatch):
    """An AppendedBatch that notes whether its log's lock is held while its bytes are joined."""

    __slots__ = ("lock_held",)

    def records(self) -> bytes:
        self.lock_held = self.log._lock._is_owned()
        return super().records()


def test_the_bytes_are_joined_after_the_lock_is_released(told_log):
    log, told = told_log
    log.append(batch(b"a" * 5000))
    told_one = told.appended[0]
    watched = _JoinWatched(log, told_one.version, told_one.base_offset, told_one.end_offset, told_one._head,
                           told_one._rest)
    served = log.read_appended(watched, 0)
    assert served == log.read(0, 1)
    assert watched.lock_held is False  # no append waits on a copy of up to max.message.bytes


def test_a_view_of_immutable_bytes_is_announced_and_a_view_of_a_mutable_buffer_is_not(told_log):
    log, told = told_log
    log.append(memoryview(batch(b"a")))  # a view of bytes: the bytes cannot change
    log.append(memoryview(bytearray(batch(b"b"))))  # its owner could change the buffer after the append
    assert [appended.base_offset for appended in told.appended] == [0] and told.plain == 1
    assert log.read_appended(told.appended[0], 0) is None  # the second append since
