"""log_service.py: every RPC of seglog.v1.LogService is served by its family's method over the one
service core, bound on the servicer itself (what gRPC's registration finds), with no hop through
the servicer; the families share the core and nothing else."""

from __future__ import annotations

import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc.log_service import ROUTES, LogServicer, LogServicerLimits
from seglog_server.rpc.registration import method_handlers
from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage import LogManager

SERVICE = pb.DESCRIPTOR.services_by_name["LogService"]


@pytest.fixture
def servicer(tmp_path):
    manager = LogManager([str(tmp_path / "d")])
    manager.startup()
    calls = StorageCalls(1, 1024)
    yield LogServicer(manager, calls, LogServicerLimits(1 << 20, 1000, 4 << 20, 1 << 20))
    calls.shutdown()
    manager.shutdown()


def test_every_method_of_the_service_has_a_route_and_every_route_a_method():
    assert sorted(ROUTES) == sorted(method.name for method in SERVICE.methods)


def test_each_rpc_is_its_familys_own_method_bound_on_the_servicer(servicer):
    for name, family_name in ROUTES.items():
        family = getattr(servicer, family_name)
        bound = getattr(servicer, name)
        assert bound.__self__ is family, name
        assert bound.__func__ is getattr(type(family), name), name


def test_registration_hands_grpc_the_familys_methods(servicer):
    handlers = method_handlers(servicer)
    for name, family_name in ROUTES.items():
        handler = handlers[name]
        behaviour = handler.unary_unary or handler.unary_stream or handler.stream_stream
        assert behaviour.__self__ is getattr(servicer, family_name), name


def test_the_families_share_one_core(servicer):
    families = {name: getattr(servicer, name) for name in set(ROUTES.values())}
    assert {id(family.core) for family in families.values()} == {id(servicer.core)}


def test_the_metrics_hook_set_on_the_servicer_is_the_one_every_family_reports_to(servicer):
    hook = object()
    servicer.metrics = hook
    assert servicer.core.metrics is hook and servicer.fetch.core.metrics is hook
    servicer.metrics = None
    assert servicer.core.metrics is None
