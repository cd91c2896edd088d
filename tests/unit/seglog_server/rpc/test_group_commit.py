"""GroupCommit over a real Log in tmp_path, with the syncs counted through the fs seam.

Each test could fail: the fs records, for every fdatasync of a ``.log``, the file size it made
durable; an ack that came before a sync covering its bytes, or a sync per produce where one per
round should do, is caught."""

from __future__ import annotations

import asyncio
import os
import random
import threading

import pytest

from seglog.records import RecordBatchBuilder
from seglog_server.rpc.errors import FlushIncompleteError
from seglog_server.rpc.group_commit import GroupCommit
from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.log.unified_log import Log
from seglog_server.storage.base.log_config import LogConfig


class CountingFS(FileSystem):
    """Counts fdatasyncs per file and remembers the largest size each made durable. A sync of a
    ``.log`` can be held at a gate (``hold``) to make the coalescing deterministic."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.sync_counts: dict[str, int] = {}
        self.durable_bytes: dict[str, int] = {}
        self.hold: threading.Event | None = None
        self.held = threading.Event()
        self._lock = threading.Lock()

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self.names[fd] = os.path.basename(path)
        return fd

    def fdatasync(self, fd):
        name = self.names[fd]
        size = self.fsize(fd)
        if name.endswith(".log") and self.hold is not None:
            self.held.set()
            self.hold.wait(10)
        super().fdatasync(fd)
        with self._lock:
            self.sync_counts[name] = self.sync_counts.get(name, 0) + 1
            self.durable_bytes[name] = max(self.durable_bytes.get(name, 0), size)

    def log_syncs(self) -> int:
        return sum(n for name, n in self.sync_counts.items() if name.endswith(".log"))


def _batch(value: bytes) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(value, timestamp_ms=1_700_000_000_000)
    return builder.build()


def _log(tmp_path, fs) -> Log:
    return Log.load(str(tmp_path / "t-0"), "t", 0, LogConfig(), clock=FakeClock(1_700_000_000_000),
                    fs=fs, had_clean_shutdown=True, rng=random.Random(1),
                    flush_scheduler=lambda task: task())


@pytest.fixture
def calls():
    calls = StorageCalls(thread_count=4, inline_io_bytes_max=65536)
    yield calls
    calls.shutdown()


ACTIVE_LOG = "00000000000000000000.log"


async def test_every_acknowledged_append_was_synced_before_its_ack(tmp_path, calls):
    fs = CountingFS()
    (tmp_path / "t-0").mkdir()
    log = _log(tmp_path, fs)
    commit = GroupCommit(calls)
    acked_sizes = []

    async def produce(i: int) -> None:
        for j in range(10):
            info = log.append(_batch(b"p%d-%d" % (i, j)))
            written = os.path.getsize(tmp_path / "t-0" / ACTIVE_LOG)
            await commit.wait_durable(log, info.last_offset + 1)
            # The ack: the bytes of this append must be on disk by now.
            assert fs.durable_bytes.get(ACTIVE_LOG, 0) >= written
            acked_sizes.append(written)

    await asyncio.gather(*(produce(i) for i in range(16)))
    assert len(acked_sizes) == 160
    assert log.recovery_point == log.log_end_offset == 160
    # Shared: far fewer syncs than acks (each round is one sync for everyone who arrived).
    assert fs.log_syncs() < 160
    log.close()


async def test_waiters_arriving_during_a_sync_share_the_next_one(tmp_path, calls):
    fs = CountingFS()
    (tmp_path / "t-0").mkdir()
    log = _log(tmp_path, fs)
    commit = GroupCommit(calls)
    fs.hold = threading.Event()
    first = asyncio.ensure_future(commit.wait_durable(log, log.append(_batch(b"a")).last_offset + 1))
    await asyncio.get_running_loop().run_in_executor(None, fs.held.wait, 10)
    # The first sync is running (held). Ten more appends arrive: none is covered by it.
    later = [asyncio.ensure_future(commit.wait_durable(log, log.append(_batch(b"b")).last_offset + 1))
             for _ in range(10)]
    await asyncio.sleep(0)
    fs.hold.set()
    await asyncio.gather(first, *later)
    assert fs.log_syncs() == 2  # the held one, then one covering all ten
    assert fs.durable_bytes[ACTIVE_LOG] == os.path.getsize(tmp_path / "t-0" / ACTIVE_LOG)
    assert commit.statistics().flush_count == 2
    log.close()


async def test_already_durable_records_cost_no_sync(tmp_path, calls):
    fs = CountingFS()
    (tmp_path / "t-0").mkdir()
    log = _log(tmp_path, fs)
    commit = GroupCommit(calls)
    end = log.append(_batch(b"a")).last_offset + 1
    await commit.wait_durable(log, end)
    syncs = fs.log_syncs()
    assert syncs == 1
    await asyncio.gather(*(commit.wait_durable(log, end) for _ in range(5)))
    assert fs.log_syncs() == syncs
    assert commit.statistics().already_durable_count == 5
    log.close()


async def test_a_truncation_during_the_covering_flush_is_not_acknowledged(tmp_path, calls):
    fs = CountingFS()
    (tmp_path / "t-0").mkdir()
    log = _log(tmp_path, fs)
    commit = GroupCommit(calls)
    fs.hold = threading.Event()
    log.append(_batch(b"a"))
    end = log.append(_batch(b"b")).last_offset + 1
    waiting = asyncio.ensure_future(commit.wait_durable(log, end))
    await asyncio.get_running_loop().run_in_executor(None, fs.held.wait, 10)
    log.truncate_to(1)
    fs.hold.set()
    with pytest.raises(FlushIncompleteError):
        await waiting
    log.close()
