"""A move that fails in any way leaves no move record behind: two in-process services in cluster
mode against a real etcd (conftest.py), the target's storage on the fault-injecting fs seam.

A record left in etcd kept the source refusing produce indefinitely once it was ``final``, and
refused every later move of the partition while it was ``copying``. Each failure here happens
after the record was written: the install's rename failing (LogDirOfflineError, a StorageError
and no ServiceError), the call cancelled by its client while the copy is being installed, the
target not holding the partition (UnknownTopicOrPartitionError), the record's creation losing
to another move. In each the record goes, the source serves produce again, and the target holds
no copy of the partition.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import threading
import time

import grpc
import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog.v1 import moves_pb2 as mpb
from seglog.v1 import moves_pb2_grpc as mpb_grpc
from seglog_server.app import SeglogService
from seglog_server.cluster.etcd_gateway import b64
from seglog_server.config import ServiceConfig
from seglog_server.storage.manager.log_manager import LogManager
from tests.integration.cluster.test_service_cluster import _names
from tests.support.fault_fs import FaultFs
from tests.support.integration_helpers import make_batch

pytestmark = pytest.mark.integration

TOPIC = "abandoned"
UNTIL_S = 20.0


async def until(predicate, what: str):
    """Waits for an eventually-true condition (etcd watches, leases), failing after UNTIL_S."""
    deadline = time.monotonic() + UNTIL_S
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {UNTIL_S} s")
        await asyncio.sleep(0.05)


class Instance:
    """One in-process service in cluster mode with its storage on a FaultFs."""

    def __init__(self, tmp_path, etcd, cluster: str, instance_id: str, **settings) -> None:
        self.fs = FaultFs()
        config = ServiceConfig(data_dirs=(str(tmp_path / instance_id),), listen="127.0.0.1:0", etcd=(etcd.endpoint,),
                               cluster_name=cluster, instance_id=instance_id, lease_ttl_ms=4000, metrics_listen=None,
                               **settings)
        self.service = SeglogService(config, manager_factory=lambda c: LogManager(
            list(c.data_dirs), default_config=c.log_config, fs=self.fs))
        self.data = tmp_path / instance_id
        self.address = ""
        self.channel: grpc.aio.Channel | None = None

    async def start(self) -> Instance:
        self.address = await self.service.start()
        self.channel = grpc.aio.insecure_channel(self.address)
        return self

    async def stop(self) -> None:
        if self.channel is not None:
            await self.channel.close()
        await self.service.stop()

    @property
    def log(self) -> pb_grpc.LogServiceStub:
        return pb_grpc.LogServiceStub(self.channel)

    @property
    def moves(self) -> mpb_grpc.PartitionMoveServiceStub:
        return mpb_grpc.PartitionMoveServiceStub(self.channel)

    @property
    def manager(self):
        return self.service._manager

    @property
    def cluster(self):
        return self.service._servicer.core.cluster  # the routing view: cache and moves

    def holds(self, topic: str) -> bool:
        return topic in dict(self.manager.list_topics())

    async def move_record(self, topic: str = TOPIC):
        return await asyncio.to_thread(self.cluster.moves.read_move, topic, 0)

    async def produce(self, values: list[bytes]) -> pb.ProduceResponse:
        return await self.log.Produce(pb.ProduceRequest(topic=TOPIC, partition=0, records=make_batch(values)),
                                      timeout=10)


@pytest.fixture
async def pair(tmp_path, etcd):
    cluster = f"abandon{next(_names)}"
    started: list[Instance] = []
    try:
        for instance_id in ("a", "b"):
            started.append(await Instance(tmp_path, etcd, cluster, instance_id).start())
        a, b = started
        await until(lambda: {i for i, info in a.cluster.cache.instances().items() if info.alive} == {"a", "b"},
                    "a seeing b")
        yield a, b
    finally:
        for instance in reversed(started):
            await instance.stop()


async def _created(a: Instance, b: Instance, count: int, *, held_by_b: bool = True) -> None:
    """The topic, owned by a (fewest partitions, then the id), with ``count`` records."""
    await a.log.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=1), timeout=10)
    assert a.cluster.cache.owner_of(TOPIC, 0).owner == "a"
    if held_by_b:
        await until(lambda: b.holds(TOPIC), "b holding the topic")
    for n in range(count):
        await a.produce([b"r%d" % n])


async def _left_clean(a: Instance, b: Instance, *, offline: bool = False) -> None:
    """No move record; the source owns the partition and takes produce again; no copy at b."""
    assert await b.move_record() is None
    assert a.cluster.cache.owner_of(TOPIC, 0).owner == "a"

    async def produced() -> bool:
        try:
            await a.produce([b"after"])
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION, exc  # fenced until its cache sees the abort
            return False
        return True

    await until(produced, "the source taking produce again")
    if b.holds(TOPIC) and not offline:
        assert b.manager.get_log(TOPIC, 0).log_end_offset == 0
    staged = [p.name for p in b.data.iterdir() if p.name.endswith("-future")]
    assert not staged, staged


async def test_an_install_failing_after_final_aborts_the_record_and_the_source_serves_again(pair):
    a, b = pair
    await _created(a, b, 20)
    # The install renames the partition's directory away first: that rename fails (EIO), so the
    # install raises LogDirOfflineError, a StorageError, once the record is already final.
    rule = b.fs.fail("replace", errno.EIO, path=lambda path: path.endswith(f"/{TOPIC}-0"))
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await b.moves.MovePartition(mpb.MovePartitionRequest(topic=TOPIC, partition=0, to_instance="b"), timeout=30)
    assert rule.hits == 1
    assert failed.value.code() == grpc.StatusCode.ABORTED, failed.value
    assert "LogDirOfflineError" in failed.value.details() and "'a' still owns it" in failed.value.details()
    await _left_clean(a, b, offline=True)  # b's directory offline: nothing of the partition served there


async def test_a_move_whose_target_does_not_hold_the_partition_aborts_the_record(pair):
    a, b = pair
    # b's copy of the topic is never created (its directory's creation short of descriptors,
    # retried and failing every time): partition_dir raises UnknownTopicOrPartitionError once
    # the move record is written.
    rule = b.fs.fail("makedirs", errno.EMFILE, path=f"{TOPIC}-0", times=None)
    await _created(a, b, 5, held_by_b=False)
    await until(lambda: rule.hits, "b failing to hold the topic")
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await b.moves.MovePartition(mpb.MovePartitionRequest(topic=TOPIC, partition=0, to_instance="b"), timeout=30)
    assert failed.value.code() == grpc.StatusCode.ABORTED, failed.value
    assert "UnknownTopicOrPartitionError" in failed.value.details()
    assert not b.holds(TOPIC)
    await _left_clean(a, b)
    b.fs.heal()  # b holds it now, and a move to it goes through: nothing of the failed one in the way
    await until(lambda: b.holds(TOPIC), "b holding the topic")
    moved = await b.moves.MovePartition(mpb.MovePartitionRequest(topic=TOPIC, partition=0, to_instance="b"),
                                        timeout=30)
    assert (moved.from_instance, moved.to_instance, moved.log_end_offset) == ("a", "b", 6)


async def test_a_move_cancelled_by_its_client_while_installing_aborts_the_record(pair, caplog):
    a, b = pair
    await _created(a, b, 20)
    reached, release = threading.Event(), threading.Event()

    def held(path: str) -> bool:  # the install's first rename waits until the call is cancelled
        if path.endswith(f"/{TOPIC}-0") and not reached.is_set():
            reached.set()
            release.wait(UNTIL_S)
        return False

    b.fs.fail("replace", errno.EIO, path=held, times=None)
    caplog.set_level(logging.INFO, logger="seglog_server.cluster.moves")
    call = b.moves.MovePartition(mpb.MovePartitionRequest(topic=TOPIC, partition=0, to_instance="b"), timeout=30)
    await until(lambda: reached.is_set(), "the install reached")
    assert (await b.move_record()).state == "final"
    call.cancel()
    try:
        await until(lambda: any("cancelled" in r.getMessage() for r in caplog.records), "the cancellation seen")
    finally:
        release.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    # The client is gone before the abandon ends: it runs on, shielded from the cancellation.
    await until(lambda: any("abandoned" in r.getMessage() for r in caplog.records), "the move abandoned")

    async def aborted() -> bool:
        return await b.move_record() is None

    await until(aborted, "the move record aborted")
    # The install ended (the cancellation waited for it): the copy it made is b's log, discarded.
    assert any("waiting for that step to end" in r.getMessage() for r in caplog.records)
    await until(lambda: b.manager.get_log(TOPIC, 0).log_end_offset == 0, "b's installed copy discarded")
    await _left_clean(a, b)


async def test_a_move_failing_before_its_copy_exists_leaves_the_targets_own_copy_alone(pair):
    a, b = pair
    await _created(a, b, 10)
    move = mpb.MovePartitionRequest(topic=TOPIC, partition=0, to_instance="b")
    await b.moves.MovePartition(move, timeout=30)  # b holds offsets 0..9 (epoch 1)
    b.service._stale_copies.cancel()  # b's copy stays when the partition moves back (not dropped)
    await a.moves.MovePartition(mpb.MovePartitionRequest(topic=TOPIC, partition=0, to_instance="a"), timeout=30)
    await until(lambda: b.cluster.cache.owner_of(TOPIC, 0).owner == "a", "b seeing a own it")
    assert b.manager.get_log(TOPIC, 0).log_end_offset == 10

    # Another move begins between b's reads and its own begin (written into etcd right then):
    # the begin fails with nothing staged or installed at b.
    store = b.cluster.moves
    begin = store.begin

    def begin_losing(topic, partition, owner, now_ms):
        record = {"source": "a", "target": "elsewhere", "epoch": owner.epoch, "state": "copying",
                  "started_ms": now_ms}
        store._gateway().txn([], [{"request_put": {"key": b64(store.keys.move(topic, partition)),
                                                   "value": b64(json.dumps(record).encode())}}])
        return begin(topic, partition, owner, now_ms)

    store.begin = begin_losing
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await b.moves.MovePartition(move, timeout=30)
    assert failed.value.code() == grpc.StatusCode.ABORTED, failed.value
    assert "OwnershipConflictError" in failed.value.details()
    assert b.manager.get_log(TOPIC, 0).log_end_offset == 10  # not truncated as if a copy was installed
    assert (await b.move_record()).target == "elsewhere"  # not b's record: not aborted by b
