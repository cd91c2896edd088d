"""The router's follow of a refusal weighs the hint's ownership epoch against the Metadata answer's:
the newer owner wins, whichever of the two names it (a refusal from a move's lagging target names
an older owner; a Metadata answer from an instance whose watch lags names an older owner too).

The router asks Metadata of a stand-in bootstrap transport answering a fixed MetadataResponse
(no network: the routing decision alone; tests/integration/cluster drives it over real instances).
"""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from seglog._connection import ConnectionOptions
from seglog._routing import Router
from seglog.errors import NotPartitionOwnerError, ServiceUnavailableError
from seglog.structs import TopicPartition
from seglog.v1 import cluster_pb2 as cluster_pb

_ADDRESSES = {"a": "a:1", "b": "b:2", "c": "c:3"}
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
    if answer is None:  # no Metadata answer: the routes stay as the hint left them
        expected = hint if taken else held
    elif not answer[2]:  # an answer not current: what the client knows wins over it
        expected = hint if taken else held
    else:  # a current answer, unless the hint just taken is newer
        expected = hint if taken and hint[1] > answer[1] else answer
    assert router._routes[_TP] == _ADDRESSES[expected[0]]
    if hint[1] > held[1] and (answer is None or hint[1] > answer[1]):
        assert router._routes[_TP] == _ADDRESSES[hint[0]]  # the newest owner named wins
    if hint[1] < held[1] and answer is None:
        assert router._routes[_TP] == _ADDRESSES[held[0]]  # a stale hint never wins
