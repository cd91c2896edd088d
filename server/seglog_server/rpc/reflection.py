"""Server reflection under both names clients ask for: ``grpc.reflection.v1`` (grpcurl and
current tools try it first) and ``grpc.reflection.v1alpha`` (older tools).

grpcio-reflection ships only the v1alpha servicer. The two protocols are the same messages in
two packages (v1 is v1alpha renamed), so their bytes on the wire are identical: the v1 method is
served by the same servicer with the v1alpha message classes, and the v1 file descriptor (the
v1alpha one under its new package) is added to the descriptor pool so that reflection can
describe the v1 service itself.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

__all__ = ["REFLECTION_V1_SERVICE_NAME", "REFLECTION_V1ALPHA_SERVICE_NAME", "enable_reflection"]

REFLECTION_V1ALPHA_SERVICE_NAME = reflection.SERVICE_NAME
REFLECTION_V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"
_V1_PACKAGE = "grpc.reflection.v1"


def _register_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    try:
        pool.FindFileByName(_V1_FILE)
        return  # another library registered it already
    except KeyError:
        pass
    file_proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file_proto)
    file_proto.name = _V1_FILE
    file_proto.package = _V1_PACKAGE
    pool.Add(file_proto)


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serves reflection for ``service_names`` (plus both reflection services) on ``server``."""
    pool = descriptor_pool.Default()
    _register_v1_descriptor(pool)
    names = (*service_names, REFLECTION_V1_SERVICE_NAME, REFLECTION_V1ALPHA_SERVICE_NAME)
    servicer = reflection.aio.ReflectionServicer(names, pool=pool)
    for service_name in (REFLECTION_V1_SERVICE_NAME, REFLECTION_V1ALPHA_SERVICE_NAME):
        handler = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            service_name, {"ServerReflectionInfo": handler}),))
