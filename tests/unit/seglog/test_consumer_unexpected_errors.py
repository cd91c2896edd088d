"""A fetch task that fails with a non-seglog exception surfaces it as a ServiceError."""

from __future__ import annotations

import asyncio

from seglog._fetch_state import PartitionState, parse_start
from seglog._routing import Router
from seglog.consumer import AsyncConsumer
from seglog.errors import ServiceError


class BrokenTransport:
    async def fetch(self, request):
        raise KeyError("a bug in the transport")

    def consume(self, request):
        return self._stream()

    async def _stream(self):
        raise KeyError("a bug in the stream")
        yield  # pragma: no cover


async def _run(method_name: str) -> PartitionState:
    consumer = AsyncConsumer("localhost:1", topic="t", partition=0)
    consumer._transport = BrokenTransport()
    consumer._router = Router(consumer._connection, consumer._transport)  # reads take its bootstrap channel
    consumer._data_ready = asyncio.Event()
    state = PartitionState(0, parse_start("earliest"))
    state.fetch_offset = 0
    await getattr(consumer, method_name)(state, state.epoch, 0)
    return state


async def test_fetch_once_wraps_an_unexpected_exception():
    state = await _run("_fetch_once")
    assert isinstance(state.error, ServiceError)
    assert isinstance(state.error.__cause__, KeyError)


async def test_stream_wraps_an_unexpected_exception():
    state = await _run("_stream")
    assert isinstance(state.error, ServiceError)
    assert isinstance(state.error.__cause__, KeyError)
