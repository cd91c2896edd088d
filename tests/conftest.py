"""Shared pytest configuration."""

import uvloop


def pytest_asyncio_loop_factories(config, item):
    # grpc.aio runs under uvloop in the service; tests use the same loop.
    return {"uvloop": uvloop.new_event_loop}
