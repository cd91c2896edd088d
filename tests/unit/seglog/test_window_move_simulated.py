"""An idempotent producer's windows following partition moves, simulated: the real sender,
windows and router against fake instances (each answers from its own view of who owns the
partition, some lagging a move), so the order answers come in and every refusal is the
simulation's, replayed from a seed. No network: ``Sender._produce_in_turn`` and the stream are
the instances, ``Router.refresh`` asks the instance that answers Metadata.

Checked: every record is written once, in its order, and a window follows a move whole: no batch
of it is repeated on its own at the new owner (``alone``), neither after a refusal naming the new
owner nor after the old owner's refusal for the move's final catch-up (PartitionMovingError)."""

from __future__ import annotations

import asyncio
import random
import struct

import grpc
import pytest

from seglog import AsyncProducer
from seglog._routing import Router, metadata_from
from seglog._send_window import SendWindow
from seglog._sender import Sender
from seglog.errors import NotPartitionOwnerError, OutOfOrderSequenceError, ServiceUnavailableError
from seglog.v1 import cluster_pb2 as cluster_pb
from seglog.v1 import log_service_pb2 as pb

_BOOTSTRAP = "127.0.0.1:9"  # instance c (answers Metadata; owns nothing), never dialled
_ADDRESSES = {"a": "127.0.0.1:11", "b": "127.0.0.1:10", "c": _BOOTSTRAP}
_INSTANCES = {address: name for name, address in _ADDRESSES.items()}


class _Cluster:
    """Who owns partition t-0 when, as each instance sees it: ``moves`` are (time, owner, epoch,
    lag), the lag being how long after the move the new owner itself sees it (c and the old
    owner see it at once). ``final`` seconds before each move, the old owner refuses as fenced
    for the final catch-up (PartitionMovingError)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, moves: list[tuple[float, str, int, float]],
                 final: float, seed: int) -> None:
        self.loop, self.t0 = loop, loop.time()
        self.moves, self.final = [(0.0, "a", 0, 0.0), *moves], final
        self.random = random.Random(seed)
        self.log: list[tuple[int, int]] = []
        self.next_sequence: dict[int, int] = {}
        self.written: dict[tuple[int, int], int] = {}
        self.last_answer: dict[str, float] = {}
        self.alone = 0

    def now(self) -> float:
        return self.loop.time() - self.t0

    def owner_seen_by(self, instance: str) -> tuple[str, int]:
        now, seen = self.now(), ("a", 0)
        for at, owner, epoch, lag in self.moves:
            if now >= at + (lag if instance == owner else 0.0):
                seen = (owner, epoch)
        return seen

    def process(self, instance: str, records: bytes):
        owner, epoch = self.owner_seen_by(instance)
        if owner != instance:
            return NotPartitionOwnerError(
                f"owned by {owner}", code=grpc.StatusCode.FAILED_PRECONDITION,
                service_error="NotPartitionOwnerError", owner_id=owner,
                owner_address=_ADDRESSES[owner], epoch=epoch)
        now = self.now()
        if any(at - self.final <= now < at and self.owner_seen_by(instance)[0] == instance
               for at, *_ in self.moves[1:]):
            return ServiceUnavailableError("moving", code=grpc.StatusCode.UNAVAILABLE,
                                           service_error="PartitionMovingError")
        producer_id, _epoch, sequence = struct.unpack_from(">qhi", records, 43)
        count = struct.unpack_from(">i", records, 57)[0]
        if (producer_id, sequence) in self.written:
            return pb.ProduceResponse(base_offset=self.written[(producer_id, sequence)])
        expected = self.next_sequence.get(producer_id)
        if expected is not None and sequence != expected:
            return OutOfOrderSequenceError(f"sequence {sequence}, expected {expected}",
                                           code=grpc.StatusCode.FAILED_PRECONDITION,
                                           service_error="OutOfOrderSequenceError")
        base = len(self.log)
        self.log.extend((producer_id, sequence + i) for i in range(count))
        self.next_sequence[producer_id] = sequence + count
        self.written[(producer_id, sequence)] = base
        return pb.ProduceResponse(base_offset=base)

    def answer_at(self, instance: str) -> float:
        """When ``instance``'s answer comes: a few ms on, after its earlier answers (one stream)."""
        at = max(self.last_answer.get(instance, 0.0), self.loop.time() + self.random.uniform(0.001, 0.006))
        self.last_answer[instance] = at
        return at


def _slot(outcome) -> pb.StreamError | pb.ProduceResponse:
    if not isinstance(outcome, Exception):
        return outcome
    error = pb.StreamError(code=outcome.code.value[0], message=outcome.message, error_class=outcome.service_error or "")
    if getattr(outcome, "owner_id", None):
        error.owner_id, error.owner_address, error.owner_epoch = outcome.owner_id, outcome.owner_address, outcome.epoch
    return error


class _Stream:
    """A ProduceStream taking up to four batches a message, answered by the instance."""

    request_bytes_max = 0
    confirmed = True
    batches_max = 4
    on_break = None

    def __init__(self, cluster: _Cluster, server: str) -> None:
        self.cluster, self.instance = cluster, _INSTANCES[server]

    async def send(self, message, whole=False):
        outcomes = [self.cluster.process(self.instance, r.records) for r in [message.produce, *message.more]]
        response = pb.ProduceStreamResponse()
        first = _slot(outcomes[0])
        (response.error if isinstance(first, pb.StreamError) else response.produce).CopyFrom(first)
        for outcome in outcomes[1:]:
            more, slot = response.more.add(), _slot(outcome)
            (more.error if isinstance(slot, pb.StreamError) else more.produce).CopyFrom(slot)
        return self.cluster.answer_at(self.instance), response

    async def wait(self, answer, timeout):
        at, response = answer
        await asyncio.sleep(max(0.0, at - asyncio.get_running_loop().time()))
        return response


class _Instance:
    choosing = False

    def __init__(self, cluster: _Cluster, server: str, request_timeout_s: float) -> None:
        self.server, self.stream = server, _Stream(cluster, server)
        self.request_timeout_s = request_timeout_s

    def produce_stream(self) -> _Stream:
        return self.stream

    async def close(self) -> None:
        pass


def _simulate(monkeypatch, seed: int, moves, *, final: float, retries: int,
              request_timeout_ms: int, records: int = 300, retry_backoff_ms: int = 100) -> tuple[_Cluster, list]:
    holder: dict = {}

    async def produce_in_turn(self, transport, topic, partition, records, turn):
        cluster = holder["cluster"]
        instance = _INSTANCES[transport.server]
        outcome = cluster.process(instance, records)
        if turn is None:
            cluster.alone += 1  # repeated on its own, outside its window's order
        else:
            turn.release()
        await asyncio.sleep(max(0.0, cluster.answer_at(instance) - asyncio.get_running_loop().time()))
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def refresh(self, seen=None):
        if self._refresh_lock is None:
            self._refresh_lock = asyncio.Lock()
        async with self._refresh_lock:
            if seen is not None and seen != self._generation:
                return self.metadata
            await asyncio.sleep(0.002)
            owner, epoch = holder["cluster"].owner_seen_by("c")
            self._apply(metadata_from(cluster_pb.MetadataResponse(
                cluster_mode=True, cluster_name="sim", instance_id="c", current=True,
                partitions=[cluster_pb.PartitionMetadata(topic="t", partition=0, owner_id=owner,
                                                         owner_address=_ADDRESSES[owner], epoch=epoch,
                                                         owner_alive=True)])))
            return self.metadata

    ids = iter(range(7, 1000))

    async def init_producer_id(self, request):
        return pb.InitProducerIdResponse(producer_id=next(ids), producer_epoch=0)

    monkeypatch.setattr(Sender, "_produce_in_turn", produce_in_turn)
    monkeypatch.setattr(Router, "refresh", refresh)
    monkeypatch.setattr(Sender, "init_producer_id", init_producer_id)

    async def run() -> list:
        producer = AsyncProducer(_BOOTSTRAP, retries=retries, linger_ms=0, request_timeout_ms=request_timeout_ms,
                                 retry_backoff_ms=retry_backoff_ms, batch_size=64, enable_idempotence=True)
        await producer.start()
        sender = producer._sender
        sender.streaming, sender.stream_batches_max = True, 4
        cluster = holder["cluster"] = _Cluster(asyncio.get_running_loop(), moves, final, seed)
        bootstrap = sender._router.bootstrap
        monkeypatch.setattr(type(bootstrap), "produce_stream", lambda self: _Stream(cluster, _BOOTSTRAP))
        for address in (_ADDRESSES["a"], _ADDRESSES["b"]):
            sender._router._owners[address] = _Instance(cluster, address, request_timeout_ms / 1000)
        pace = random.Random(seed)
        futures = []
        for i in range(records):
            futures.append(await producer.send("t", b"%05d" % i, partition=0))
            if pace.random() < 0.2:
                await asyncio.sleep(pace.uniform(0, 0.004))
        await asyncio.wait_for(producer.flush(), 20)
        outcomes = [future.exception() or future.result().offset for future in futures]
        await producer.close()
        return outcomes

    outcomes = asyncio.run(run())
    return holder["cluster"], outcomes


def _written_once_in_order(cluster: _Cluster, outcomes: list) -> None:
    offsets = [o for o in outcomes if isinstance(o, int)]
    assert offsets == sorted(offsets)
    assert len(cluster.log) == len(set(cluster.log)) == len(offsets)


@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_the_final_catch_up_holds_the_window_at_once(monkeypatch, seed):
    """a -> b at 0.15 s, c (Metadata) at once, b 0.4 s late; a refuses PartitionMovingError for
    the 0.05 s before: the window holds on that refusal too and follows whole (once: five
    batches repeated on their own at b)."""
    cluster, outcomes = _simulate(monkeypatch, seed, [(0.15, "b", 1, 0.4)], final=0.05, retries=0,
                                  request_timeout_ms=2000)
    assert all(isinstance(o, int) for o in outcomes), [o for o in outcomes if not isinstance(o, int)][:3]
    _written_once_in_order(cluster, outcomes)
    assert cluster.alone == 0


@pytest.mark.parametrize("seed", [11, 12])
def test_a_new_move_after_a_follow_that_timed_out_is_followed_afresh(monkeypatch, seed):
    """a -> b at 0.05 s with b never catching up in the run: the follow times out (0.3 s) and
    the window's batches retry the ordinary way (every 0.4 s), no success since. Then b -> a at
    epoch 2 at 1 s: the old owner's refusal names the newer epoch, so that move is followed with
    its own deadline (free resends, ``SendWindow.moved``), where once the deadline of the first
    one, long passed, left it to the ordinary retries. Every record is written once, in order."""
    follows: list[float] = []
    real_moved = SendWindow.moved

    def moved(self, entry, outcome):
        follows.append(clock())
        return real_moved(self, entry, outcome)

    monkeypatch.setattr(SendWindow, "moved", moved)
    cluster_of: list[_Cluster] = []

    def clock() -> float:
        return cluster_of[0].now() if cluster_of else 0.0

    real_init = _Cluster.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        cluster_of.append(self)

    monkeypatch.setattr(_Cluster, "__init__", init)
    cluster, outcomes = _simulate(monkeypatch, seed, [(0.05, "b", 1, 60.0), (1.0, "a", 2, 0.0)], final=0.0,
                                  retries=100, request_timeout_ms=300, retry_backoff_ms=400, records=200)
    assert all(isinstance(o, int) for o in outcomes), [o for o in outcomes if not isinstance(o, int)][:3]
    _written_once_in_order(cluster, outcomes)
    assert any(at < 1.0 for at in follows), "the first move was meant to be followed"
    assert any(at >= 1.0 for at in follows)  # the second move followed, not retried the ordinary way


@pytest.mark.parametrize("seed", [11, 12])
def test_a_new_move_fenced_for_its_final_catch_up_after_a_follow_that_timed_out_is_followed_afresh(
        monkeypatch, seed):
    """a -> b at 0.05 s, b catching up only at 1 s: the follow times out (0.3 s) and the
    window's batches retry the ordinary way (every 0.4 s), no success since. b -> a at epoch 2
    at 1.6 s, b fenced for the final catch-up from 0.6 s before it (from 1 s, when it sees itself
    owner): the new move's first refusal is b's PartitionMovingError, with no epoch, so it starts
    its own hold with its own deadline (free resends, ``SendWindow.moved``), where once the
    deadline of the timed-out follow, long passed, left its refusals to spend counted retries."""
    follows: list[float] = []
    real_moved = SendWindow.moved
    cluster_of: list[_Cluster] = []

    def moved(self, entry, outcome):
        follows.append(cluster_of[0].now())
        return real_moved(self, entry, outcome)

    real_init = _Cluster.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        cluster_of.append(self)

    monkeypatch.setattr(SendWindow, "moved", moved)
    monkeypatch.setattr(_Cluster, "__init__", init)
    cluster, outcomes = _simulate(monkeypatch, seed, [(0.05, "b", 1, 0.95), (1.6, "a", 2, 0.0)], final=0.6,
                                  retries=100, request_timeout_ms=300, retry_backoff_ms=400, records=200)
    assert all(isinstance(o, int) for o in outcomes), [o for o in outcomes if not isinstance(o, int)][:3]
    _written_once_in_order(cluster, outcomes)
    assert cluster.alone == 0
    assert any(at < 0.5 for at in follows), "the first move was meant to be followed"
    assert any(1.0 <= at < 1.6 for at in follows)  # b's fence followed as a move, not retried the ordinary way
