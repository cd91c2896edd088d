"""The storage announces its own changes (``ChangeListener``): every append that moved the log end
offset, a truncation, DeleteRecords that moved the log start, a topic's deletion; on the thread
that made the change, after it is readable. Nothing is announced for what changed nothing (an
idempotent retry, a refused batch, a truncation above the end)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from tests.support.log_test_support import NOW_MS, batch, open_log

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import StorageError
from seglog_server.storage.manager.log_manager import LogManager


class Heard:
    """A listener that keeps what it was told, with the log end offset it saw at that moment."""

    def __init__(self) -> None:
        self.log = None
        self.changes: list[tuple[str, int, int | None, str]] = []

    def __call__(self, topic: str, partition: int, *appended: object) -> None:  # an append's batch too
        end = self.log.log_end_offset if self.log is not None else None
        self.changes.append((topic, partition, end, threading.current_thread().name))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


@pytest.fixture
def heard_log(tmp_path, clock):
    log = open_log(tmp_path / "t-3", clock)
    heard = Heard()
    heard.log = log
    log.set_change_listener(heard)
    return log, heard


def ends(heard: Heard) -> list[int | None]:
    return [change[2] for change in heard.changes]


def test_each_append_is_announced_after_the_log_end_offset_moved(heard_log):
    log, heard = heard_log
    log.append(batch(b"a", b"b"))
    log.append(batch(b"c"))
    assert [change[:3] for change in heard.changes] == [("topic", 0, 2), ("topic", 0, 3)]


def test_an_append_on_a_pool_thread_is_announced_from_that_thread(heard_log):
    log, heard = heard_log
    with ThreadPoolExecutor(1, thread_name_prefix="storage-pool") as pool:
        pool.submit(log.append, batch(b"a")).result()
    assert heard.changes[0][3].startswith("storage-pool")


def test_a_retried_idempotent_batch_and_a_refused_batch_announce_nothing(heard_log):
    log, heard = heard_log
    idempotent = batch(b"a", producer_id=7, producer_epoch=0, base_sequence=0)
    log.append(idempotent)
    log.append(idempotent)  # the duplicate: its original offsets, nothing written
    with pytest.raises(StorageError):  # a torn batch
        log.append(batch(b"x")[:-1])
    assert ends(heard) == [1]


def test_flush_messages_topics_announce_before_the_append_returns(tmp_path, clock):
    from tests.support.log_test_support import config

    log = open_log(tmp_path / "t-0", clock, config(flush_messages=1))
    heard = Heard()
    heard.log = log
    log.set_change_listener(heard)
    log.append(batch(b"a"))
    assert ends(heard) == [1] and log.recovery_point == 1


def test_truncations_announce_and_a_truncation_above_the_end_does_not(heard_log):
    log, heard = heard_log
    for value in (b"a", b"b", b"c"):
        log.append(batch(value))
    log.roll()
    log.append(batch(b"d"))
    assert not log.truncate_to(10)
    assert log.truncate_to(2)  # inside the first segment
    log.truncate_fully_and_start_at(50)
    assert ends(heard)[4:] == [2, 50]


def test_truncating_below_the_first_segment_announces_too(heard_log):
    log, heard = heard_log
    log.append(batch(b"a"))
    log.truncate_fully_and_start_at(20)
    log.append(batch(b"b"))
    assert log.truncate_to(5)  # below every segment: the log restarts at 5
    assert ends(heard) == [1, 20, 21, 5]


def test_delete_records_announces_only_when_the_log_start_moved(heard_log):
    log, heard = heard_log
    log.append(batch(b"a", b"b", b"c"))
    log.delete_records(2)
    log.delete_records(1)  # below the start: nothing moves
    assert ends(heard) == [3, 3]
    assert log.log_start_offset == 2


def test_a_failing_listener_does_not_fail_the_append(tmp_path, clock, caplog):
    log = open_log(tmp_path / "t-0", clock)

    def broken(topic: str, partition: int) -> None:
        raise RuntimeError("listener bug")

    log.set_change_listener(broken)
    info = log.append(batch(b"a"))
    assert (info.base_offset, log.log_end_offset) == (0, 1)
    assert "the change listener failed" in caplog.text


def test_the_manager_tells_its_listener_of_every_log_and_of_deleted_topics(tmp_path, clock):
    manager = LogManager([str(tmp_path / "d0")], clock=clock)
    manager.startup()
    heard = Heard()
    try:
        manager.set_change_listener(heard)
        manager.create_topic("t", 2, {})
        manager.get_log("t", 1).append(batch(b"a"))
        manager.delete_topic("t")
    finally:
        manager.shutdown()
    assert sorted(change[:2] for change in heard.changes) == [("t", 0), ("t", 1), ("t", 1)]


def test_logs_loaded_at_startup_tell_the_manager_listener(tmp_path, clock):
    manager = LogManager([str(tmp_path / "d0")], clock=clock)
    manager.startup()
    manager.create_topic("t", 1, {})
    manager.shutdown()
    manager = LogManager([str(tmp_path / "d0")], clock=clock)
    manager.startup()
    heard = Heard()
    try:
        manager.set_change_listener(heard)
        manager.get_log("t", 0).append(batch(b"a"))
    finally:
        manager.shutdown()
    assert [change[:2] for change in heard.changes] == [("t", 0)]
