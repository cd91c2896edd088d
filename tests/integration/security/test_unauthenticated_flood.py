"""Callers who have not authenticated cannot crowd out one who has: a real service with tokens,
floods of wrong tokens over many connections, and a known caller whose every produce succeeds."""

from __future__ import annotations

import asyncio
import secrets

import grpc
import pytest
from tests.support.integration_helpers import CHANNEL_OPTIONS, make_batch

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.security.token_file import create_token, format_entry

pytestmark = pytest.mark.integration

# Few request slots, so a flood that held them while its tokens were hashed would fill them at
# once; many connections, each with calls in flight, as many separate callers.
REQUEST_SLOTS = 8
FLOOD_CONNECTIONS = 24
FLOOD_CALLS_IN_FLIGHT = 2  # per connection
FLOOD_CALLS_MAX = 400  # per connection: the flood ends on its own even if the known caller hangs
KNOWN_PRODUCES = 40
# A flooder answered anything else than these means the service failed under the flood.
FLOOD_CODES = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED}


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _unknown_key_id_token(_known: str) -> str:
    return f"seglog_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"


def _wrong_secret_token(known: str) -> str:
    """The known token's key id (key ids are not secret) with a random secret: a real check."""
    key_part, _, _ = known.rpartition("_")
    return f"{key_part}_{secrets.token_urlsafe(32)}"


async def _flood_one(address: str, make_token, known: str, done: asyncio.Event, codes: list) -> None:
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.LogServiceStub(channel)

        async def loop(calls_max: int) -> None:
            for _ in range(calls_max):
                if done.is_set():
                    return
                try:
                    await stub.ListTopics(pb.ListTopicsRequest(), timeout=30,
                                          metadata=_bearer(make_token(known)))
                except grpc.aio.AioRpcError as error:
                    codes.append(error.code())
                else:
                    codes.append(grpc.StatusCode.OK)

        await asyncio.gather(*(loop(FLOOD_CALLS_MAX // FLOOD_CALLS_IN_FLIGHT)
                               for _ in range(FLOOD_CALLS_IN_FLIGHT)))


async def _known_caller(address: str, token: str, topic: str, flood_codes: list) -> list:
    outcomes = []
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        # Its token is checked (and cached) once, before the flood.
        await stub.ListTopics(pb.ListTopicsRequest(), timeout=30, metadata=_bearer(token))
        # Produce only once the flood is under way: some wrong tokens were answered.
        while len(flood_codes) < FLOOD_CONNECTIONS:
            await asyncio.sleep(0.01)
        for number in range(KNOWN_PRODUCES):
            try:
                await stub.Produce(pb.ProduceRequest(
                    topic=topic, partition=0, records=make_batch([b"%d" % number])),
                    timeout=30, metadata=_bearer(token))
            except grpc.aio.AioRpcError as error:
                outcomes.append((error.code(), error.details()))
            else:
                outcomes.append(grpc.StatusCode.OK)
    return outcomes


async def _run(address: str, token: str, topic: str, make_token) -> tuple[list, list]:
    done = asyncio.Event()
    codes: list = []
    flood = [asyncio.ensure_future(_flood_one(address, make_token, token, done, codes))
             for _ in range(FLOOD_CONNECTIONS)]
    try:
        outcomes = await _known_caller(address, token, topic, codes)
    finally:
        done.set()
        await asyncio.gather(*flood)
    return outcomes, codes


@pytest.fixture(scope="module")
def tokened(tmp_path_factory):
    from tests.support.integration_helpers import ServiceProcess

    workdir = tmp_path_factory.mktemp("flood")
    token, entry = create_token("writer")
    (workdir / "tokens").write_text(format_entry(entry))
    service = ServiceProcess(workdir, [workdir / "data"], [
        "--auth-tokens", str(workdir / "tokens"), "--rpc-concurrency-max", str(REQUEST_SLOTS),
    ]).start()
    service.token = token
    yield service
    assert service.stop() == 0, service.log()


@pytest.mark.parametrize("make_token", [_unknown_key_id_token, _wrong_secret_token],
                         ids=["unknown key ids", "known key id, wrong secrets"])
def test_a_wrong_token_flood_never_refuses_a_cached_callers_produce(tokened, make_token):
    topic = f"flood-{make_token.__name__.strip('_')}"
    tokened.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1), timeout=10,
                             metadata=_bearer(tokened.token))
    outcomes, codes = asyncio.run(_run(tokened.address, tokened.token, topic, make_token))
    assert outcomes == [grpc.StatusCode.OK] * KNOWN_PRODUCES
    assert set(codes) <= FLOOD_CODES, set(codes)
    # The service still serves: the known caller reads back every record it wrote.
    fetched = tokened.stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=0, decode=True),
                                 timeout=10, metadata=_bearer(tokened.token))
    assert fetched.high_watermark == KNOWN_PRODUCES
