"""Reflection names every service the server registers, no more: the seglog services are read from
the generated descriptors of every seglog.v1 proto file (a service added there is checked without
editing this test), and a call to each proves it is registered (a service the server does not
hold answers UNIMPLEMENTED, as the control shows)."""

from __future__ import annotations

import importlib
import pkgutil

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2

import seglog.v1

pytestmark = pytest.mark.integration

_ALWAYS = {"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
           "grpc.reflection.v1alpha.ServerReflection"}


def _seglog_services():
    """Every service of the seglog.v1 descriptors: full name -> its ServiceDescriptor."""
    services = {}
    for module_info in pkgutil.iter_modules(seglog.v1.__path__):
        if module_info.name.endswith("_pb2"):
            module = importlib.import_module(f"seglog.v1.{module_info.name}")
            services.update((s.full_name, s) for s in module.DESCRIPTOR.services_by_name.values())
    return services


def _reflect(channel, requests):
    call = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    return list(call(iter(requests), timeout=10))


def _code_of_empty_call(channel, service: str, method: str) -> grpc.StatusCode:
    """The status of ``method`` called with an empty request (raw bytes: no message class needed)."""
    try:
        channel.unary_unary(f"/{service}/{method}")(b"", timeout=10)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_reflection_lists_exactly_the_seglog_services_health_and_itself(service):
    services = _seglog_services()
    assert {"seglog.v1.LogService", "seglog.v1.ClusterService", "seglog.v1.PartitionMoveService"} <= set(services)
    [listed] = _reflect(service.channel, [reflection_pb2.ServerReflectionRequest(list_services="")])
    assert {s.name for s in listed.list_services_response.service} == set(services) | _ALWAYS


def test_reflection_describes_each_seglog_service(service):
    names = sorted(_seglog_services())
    answers = _reflect(service.channel, [reflection_pb2.ServerReflectionRequest(file_containing_symbol=name)
                                         for name in names])
    for name, answer in zip(names, answers, strict=True):
        assert answer.WhichOneof("message_response") == "file_descriptor_response", (name, answer)


def test_each_seglog_service_is_registered_and_answers(service):
    for name, descriptor in _seglog_services().items():
        unary = [m for m in descriptor.methods if not m.client_streaming and not m.server_streaming]
        assert unary, f"{name} has no unary method to probe"
        code = _code_of_empty_call(service.channel, name, unary[0].name)
        assert code != grpc.StatusCode.UNIMPLEMENTED, f"{name}.{unary[0].name} is not registered"
    control = _code_of_empty_call(service.channel, "seglog.v1.NoSuchService", "Nothing")
    assert control == grpc.StatusCode.UNIMPLEMENTED
