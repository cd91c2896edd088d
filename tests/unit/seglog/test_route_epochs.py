"""The router's follow of a refusal weighs the hint's ownership epoch against the Metadata answer's:
the newer owner wins, whichever of the two names it (a refusal from a move's lagging target names
an older owner; a Metadata answer from an instance whose watch lags names an older owner too), and
a current answer never drops a route back to an older owner. An older owner is taken once the
first naming of one since the route held was last confirmed (a success on it, or an owner at its
epoch or newer named) is a request timeout old: a topic deleted and created again starts its
epochs at 0, and a producer that sends rarely is not pinned to the old route.

The router asks Metadata of a stand-in bootstrap transport answering a fixed MetadataResponse
(no network: the routing decision alone; tests/integration/cluster drives it over real instances).
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog._connection import ConnectionOptions
from seglog._routing import Router
from seglog.errors import NotPartitionOwnerError, SeglogError, ServiceUnavailableError
from seglog.structs import TopicPartition
from seglog.v1 import cluster_pb2 as cluster_pb
from seglog.v1 import log_service_pb2 as pb

_ADDRESSES = {"a": "a:1", "b": "b:2", "c": "c:3", "d": "d:4"}
_TP = TopicPartition("t", 0)


class _Answering:
    """A transport whose Metadata answers ``response`` (None: fails as an instance that does not
    answer) and that serves nothing else."""

    def __init__(self, server: str, response: cluster_pb.MetadataResponse | None) -> None:
        self.server, self.response = server, response

    async def metadata(self, request: cluster_pb.MetadataRequest) -> cluster_pb.MetadataResponse:
        if self.response is None:
            raise ServiceUnavailableError("not answering")
        return self.response


def _answer(owner: str, epoch: int, current: bool = True) -> cluster_pb.MetadataResponse:
    return cluster_pb.MetadataResponse(
        cluster_mode=True, cluster_name="c", instance_id="c", current=current,
        partitions=[cluster_pb.PartitionMetadata(topic="t", partition=0, owner_id=owner,
                                                 owner_address=_ADDRESSES[owner], epoch=epoch, owner_alive=True)])


_owner = st.sampled_from(sorted(_ADDRESSES))


@given(held=st.tuples(_owner, st.integers(0, 5)), hint=st.tuples(_owner, st.integers(0, 5)),
       answer=st.none() | st.tuples(_owner, st.integers(0, 5), st.booleans()))
def test_the_newer_of_the_hint_and_the_metadata_answer_routes_the_partition(held, hint, answer):
    bootstrap = _Answering("c:3", _answer(*held))
    router = Router(ConnectionOptions(server="c:3"), bootstrap)
    router._owners.update({address: _Answering(address, None) for address in ("a:1", "b:2")})

    async def follow() -> None:
        await router.refresh()  # the route held, at its epoch
        bootstrap.response = None if answer is None else _answer(*answer)
        error = NotPartitionOwnerError("moved", owner_id=hint[0], owner_address=_ADDRESSES[hint[0]], epoch=hint[1])
        await router.follow("t", 0, error, router.transport_for("t", 0))

    asyncio.run(follow())
    taken = hint[1] >= held[1]  # a hint older than the route held is stale: not taken
    expected = hint if taken else held  # no answer, or one not current: what the client knows
    if answer is not None and answer[2] and answer[1] >= expected[1]:
        expected = answer  # a current answer, unless the route held (a hint just taken or not) is newer
    assert router._routes[_TP] == _ADDRESSES[expected[0]]
    assert router._epochs[_TP] == expected[1]
    if hint[1] > held[1] and (answer is None or hint[1] > answer[1]):
        assert router._routes[_TP] == _ADDRESSES[hint[0]]  # the newest owner named wins
    if hint[1] < held[1] and answer is None:
        assert router._routes[_TP] == _ADDRESSES[held[0]]  # a stale hint never wins


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _router(held: tuple[str, int], clock: _Clock) -> tuple[Router, _Answering]:
    bootstrap = _Answering("c:3", _answer(*held))
    router = Router(ConnectionOptions(server="c:3", request_timeout_ms=2000), bootstrap)
    router._owners.update({address: _Answering(address, None) for address in _ADDRESSES.values()})
    router._clock = clock
    asyncio.run(router.refresh())
    return router, bootstrap


def _refused(router: Router, owner: str, epoch: int) -> str:
    error = NotPartitionOwnerError("moved", owner_id=owner, owner_address=_ADDRESSES[owner], epoch=epoch)
    asyncio.run(router.follow("t", 0, error, router.transport_for("t", 0)))
    return router._routes[_TP]


def test_a_move_whose_target_and_metadata_instance_both_lag_does_not_ping_pong():
    """b owns at epoch 1 but still names a (epoch 0); c answers Metadata, current, naming a at
    epoch 0 too. The route follows a's hint to b and stays there: neither b's stale hint nor
    c's older answer drops it back to a (once: a->b, b->a, a->b, ...)."""
    clock = _Clock()
    router, _ = _router(("a", 0), clock)
    seen = [_refused(router, "b", 1)]
    for _ in range(5):
        clock.now += 0.1
        seen.append(_refused(router, "a", 0))  # b refuses naming a; c's answer names a
    assert seen == ["b:2"] * 6
    assert router._epochs[_TP] == 1


@pytest.mark.parametrize("metadata", ["not current", "failing", "current"])
def test_a_topic_created_again_is_routed_to_its_new_owner_within_the_request_timeout(metadata):
    """The old incarnation's route is held at epoch 5 (d); the topic is deleted and created
    again, owned by a at epoch 0. d refuses naming a at epoch 0, and Metadata either lags (not
    current, still d at 5), fails, or answers a at 0: an older owner, refused while a lag may
    explain it, taken once it has been named over and over for the request timeout (2 s)."""
    clock = _Clock()
    router, bootstrap = _router(("d", 5), clock)
    bootstrap.response = {"not current": _answer("d", 5, current=False), "failing": None,
                          "current": _answer("a", 0)}[metadata]
    seen = []
    for _ in range(4):
        seen.append(_refused(router, "a", 0))
        clock.now += 0.5
    assert seen == ["d:4"] * 4
    assert _refused(router, "a", 0) == "a:1"  # 2 s of older owners named: taken
    assert router._epochs[_TP] == 0
    assert _refused(router, "b", 1) == "b:2"  # and the new incarnation's epochs count from there


def test_a_producer_sending_rarely_is_routed_to_a_topic_created_again():
    """The old incarnation's route is held at epoch 5 (d); the topic is deleted and created
    again, owned by a at epoch 0, and Metadata is current (a at 0). A producer sends every 5 s,
    each send about 0.5 s of attempts, each refused by d naming a at 0: the disagreement's age
    counts from its first naming, so the second send (more than the request timeout, 2 s, after
    it) goes to a. Before, a gap of more than the request timeout between namings started the
    count again: every send failed for ever."""
    clock = _Clock()
    router, bootstrap = _router(("d", 5), clock)
    bootstrap.response = _answer("a", 0)
    sends = []
    for _ in range(3):
        routes = []
        for _ in range(6):
            routes.append(_refused(router, "a", 0))
            clock.now += 0.1
        sends.append(routes[-1])
        clock.now += 5.0
    assert sends == ["d:4", "a:1", "a:1"]
    assert router._epochs[_TP] == 0


def test_an_older_owner_named_after_the_route_held_answered_is_a_new_disagreement():
    """A request answered with success on the route held confirms it: an older owner named
    before no longer counts, so a stray stale hint long after (a move's lagging target, once
    in a while) never gives the route up; one named again and again for the request timeout
    with no success between is taken."""
    clock = _Clock()
    router, bootstrap = _router(("b", 1), clock)
    bootstrap.response = None
    for _ in range(4):
        assert _refused(router, "a", 0) == "b:2"
        router.confirm("t", 0, router.transport_for("t", 0))  # the next send to b succeeds
        clock.now += 2.5
    assert router._epochs[_TP] == 1
    assert _refused(router, "a", 0) == "b:2"
    clock.now += 2.5
    assert _refused(router, "a", 0) == "a:1"  # no success between: the disagreement is 2.5 s old


def test_at_owner_confirms_the_route_held_by_a_success():
    """``at_owner``'s answer from the route held clears the disagreement's age, as a producer's
    success does."""
    clock = _Clock()
    router, bootstrap = _router(("b", 1), clock)
    bootstrap.response = None
    assert _refused(router, "a", 0) == "b:2"
    assert _TP in router._older_since

    async def send(transport):
        return transport.server

    assert asyncio.run(router.at_owner("t", 0, send)) == "b:2"
    assert _TP not in router._older_since
    clock.now += 2.5
    assert _refused(router, "a", 0) == "b:2"


_event = st.one_of(st.tuples(_owner, st.integers(0, 5), st.floats(0, 6)), st.tuples(st.just("ok"), st.floats(0, 6)))


@given(held=st.integers(0, 5), events=st.lists(_event, max_size=14), answered=st.booleans())
def test_an_older_owner_is_taken_once_its_disagreement_is_a_request_timeout_old(held, events, answered):
    """Whatever the hints (owner, epoch, seconds after the last event), with successes on the
    route held between them, and Metadata failing or lagging (not current, repeating the route
    held): the route's epoch drops to an older owner's exactly when the first older owner named
    since the route was last confirmed (a success, or an owner at its epoch or newer named) was
    named a request timeout ago or more, however far apart the namings."""
    clock = _Clock()
    router, bootstrap = _router(("d", held), clock)
    epoch, since = held, None
    for event in events:
        clock.now += event[-1]
        if event[0] == "ok":
            router.confirm("t", 0, router.transport_for("t", 0))
            since = None
            continue
        owner, hint_epoch, _ = event
        bootstrap.response = _answer(*_route_of(router), current=False) if answered else None
        _refused(router, owner, hint_epoch)
        if hint_epoch >= epoch:
            epoch, since = hint_epoch, None
        else:
            if since is None:
                since = clock.now
            if clock.now - since >= 2.0:
                epoch, since = hint_epoch, None
        assert router._epochs[_TP] == epoch
    if epoch > 0:  # never pinned: an older owner named for the request timeout is taken
        bootstrap.response = None
        _refused(router, "a", 0)
        clock.now += 2.5
        _refused(router, "a", 0)
        assert router._epochs[_TP] == 0


def _route_of(router: Router) -> tuple[str, int]:
    address = router._routes[_TP]
    return next(owner for owner, a in _ADDRESSES.items() if a == address), router._epochs[_TP]


@pytest.mark.parametrize("grouped", [False, True])
def test_a_producers_success_on_the_route_held_confirms_it(monkeypatch, grouped):
    """The producer's send answered with success on the route held (one batch, or a group of
    them) clears the age of an older owner named before, as ``at_owner`` does; a group all
    refused does not (an error no route follows)."""
    from seglog import AsyncProducer
    from seglog._sender import Sender

    outcome: list = [pb.ProduceResponse(base_offset=0)]

    async def produce_on(self, transport, topic, partition, records, turn=None):
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        return outcome[0]

    async def produce_group_on(self, transport, topic, partition, records, turn=None):
        return [outcome[0]] * len(records)

    monkeypatch.setattr(Sender, "_produce_on", produce_on)
    monkeypatch.setattr(Sender, "_produce_group_on", produce_group_on)

    async def run() -> list[bool]:
        producer = AsyncProducer("127.0.0.1:9", enable_idempotence=False)
        await producer.start()
        sender, router = producer._sender, producer._sender._router
        router._routes[_TP], router._epochs[_TP] = "b:2", 1
        router._owners["b:2"] = _Answering("b:2", None)
        disputed = []
        for result in (pb.ProduceResponse(base_offset=0), SeglogError("refused")):
            outcome[0] = result
            router._older_since[_TP] = 0.0  # an older owner named a moment ago
            if grouped:
                await sender.produce_group_once("t", 0, [b"x", b"y"])
            else:
                try:
                    await sender.produce_once("t", 0, b"x")
                except SeglogError:
                    pass
            disputed.append(_TP in router._older_since)
        del router._owners["b:2"]  # a stand-in: nothing to close
        await producer.close()
        return disputed

    assert asyncio.run(run()) == [False, True]


@pytest.mark.parametrize("caller", ["at_owner", "produce_once", "produce_group_once"])
def test_a_late_success_on_a_route_given_up_does_not_confirm_the_route_held(monkeypatch, caller):
    """A send is in flight on a (the route held, epoch 0); another request follows a newer hint
    to b (epoch 1), then an older owner is named against b (its disagreement's age starts). a's
    late success says nothing of b: the disagreement stands, to be taken a request timeout on.
    A success on b clears it. Before, any success confirmed whatever route was held by then."""
    from seglog import AsyncProducer
    from seglog._sender import Sender

    clock = _Clock()
    gates: dict[str, asyncio.Event] = {}

    async def answer(transport) -> pb.ProduceResponse:
        await gates[transport.server].wait()
        return pb.ProduceResponse(base_offset=0)

    async def produce_on(self, transport, topic, partition, records, turn=None):
        return await answer(transport)

    async def produce_group_on(self, transport, topic, partition, records, turn=None):
        return [await answer(transport)] * len(records)

    monkeypatch.setattr(Sender, "_produce_on", produce_on)
    monkeypatch.setattr(Sender, "_produce_group_on", produce_group_on)

    async def refused(router: Router, owner: str, epoch: int) -> None:
        error = NotPartitionOwnerError("moved", owner_id=owner, owner_address=_ADDRESSES[owner], epoch=epoch)
        await router.follow("t", 0, error, router.transport_for("t", 0))

    async def run() -> list[bool]:
        producer = AsyncProducer("c:3", enable_idempotence=False, request_timeout_ms=2000)
        await producer.start()
        sender, router = producer._sender, producer._sender._router
        stand_ins = {address: _Answering(address, None) for address in _ADDRESSES.values()}
        router._owners.update(stand_ins)
        bootstrap, router.bootstrap = router.bootstrap, stand_ins["c:3"]  # Metadata fails: the client keeps what it knows
        router._clock = clock
        router._routes[_TP], router._epochs[_TP] = "a:1", 0
        send = {"at_owner": lambda: router.at_owner("t", 0, answer),
                "produce_once": lambda: sender.produce_once("t", 0, b"x"),
                "produce_group_once": lambda: sender.produce_group_once("t", 0, [b"x", b"y"])}[caller]
        gates["a:1"], gates["b:2"] = asyncio.Event(), asyncio.Event()
        late = asyncio.ensure_future(send())  # in flight on a
        await asyncio.sleep(0)
        await refused(router, "b", 1)  # another request follows a newer owner's hint to b
        assert router.transport_for("t", 0) is stand_ins["b:2"]
        await refused(router, "d", 0)  # an older owner named against b: its age starts
        disputed = [_TP in router._older_since]
        gates["a:1"].set()
        await late  # a answers, late
        disputed.append(_TP in router._older_since)
        gates["b:2"].set()
        await send()  # b answers
        disputed.append(_TP in router._older_since)
        for address in stand_ins:
            router._owners.pop(address, None)  # stand-ins: nothing to close
        router.bootstrap = bootstrap
        await producer.close()
        return disputed

    assert asyncio.run(run()) == [True, True, False]


class _Reading(_Answering):
    """A stand-in owner that answers a reader: Fetch, a Consume stream of two responses, and
    OffsetsForTimes (each target found, or refused naming ``refuses_for`` when set)."""

    def __init__(self, server: str, refuses_for: str | None = None) -> None:
        super().__init__(server, None)
        self.refuses_for = refuses_for

    async def fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        return pb.FetchResponse()

    async def consume(self, request: pb.ConsumeRequest):
        for _ in range(2):
            yield pb.FetchResponse()

    async def offsets_for_times(self, request: pb.OffsetsForTimesRequest, message=None) -> pb.OffsetsForTimesResponse:
        def answer(target) -> pb.PartitionOffset:
            if self.refuses_for is None:
                return pb.PartitionOffset(topic=target.topic, partition=target.partition, offset=0)
            owner = next(o for o, a in _ADDRESSES.items() if a == self.refuses_for)
            error = pb.PartitionError(error_class=NotPartitionOwnerError.__name__, owner_id=owner,
                                      owner_address=self.refuses_for, owner_epoch=0)
            return pb.PartitionOffset(topic=target.topic, partition=target.partition, offset=-1, error=error)

        return pb.OffsetsForTimesResponse(results=[answer(t) for t in request.partitions])


@pytest.mark.parametrize("reader", ["fetch", "consume", "lookup", "lookups_across_owners", "refused_lookup"])
def test_a_readers_success_on_the_route_held_confirms_it(reader):
    """A reading client's answer on the route held clears the age of an older owner named
    before, as a send's does: a Fetch answered, a Consume stream's first response after its
    opening, a lookup target answered (alone, or among targets asked of several owners). A
    lookup refused naming another owner does not. Before, a reader never confirmed: an older
    owner named hours ago was still the disagreement's start, and the next stale hint was taken
    at once (a ping-pong per move)."""
    from seglog import AsyncConsumer
    from seglog._fetch_state import PartitionState

    async def run() -> bool:
        consumer = AsyncConsumer("c:3", "t", partition=0)
        router = Router(ConnectionOptions(server="c:3", request_timeout_ms=2000), _Answering("c:3", None))
        consumer._router = router
        router._clock = _Clock()  # the disagreement stays younger than the request timeout
        router._owners["b:2"] = _Reading("b:2", "d:4" if reader == "refused_lookup" else None)
        router._owners["a:1"] = _Reading("a:1")
        router._routes[_TP], router._epochs[_TP] = "b:2", 1
        router._routes[TopicPartition("t", 1)], router._epochs[TopicPartition("t", 1)] = "a:1", 0
        router._older_since[_TP] = 0.0  # an older owner named a moment (or hours) ago
        if reader == "fetch":
            state = PartitionState(0, consumer._start, "t")
            await consumer._fetch_within_quota(pb.FetchRequest(topic="t", partition=0), state, state.epoch)
        elif reader == "consume":
            stream = consumer._consume_at_owner(pb.ConsumeRequest(topic="t", partition=0), lambda: 0)
            await stream.__anext__()
            await stream.aclose()
        else:
            targets = [pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=0)]
            if reader == "lookups_across_owners":
                targets.append(pb.PartitionTimestamp(topic="t", partition=1, timestamp_ms=0))
            await router.offsets_for_times(pb.OffsetsForTimesRequest(partitions=targets))
        return _TP in router._older_since

    assert asyncio.run(run()) is (reader == "refused_lookup")
