"""Registers the LogService servicer with a gRPC server, as the generated
``add_LogServiceServicer_to_server`` does, except for one thing: responses of type FetchResponse
may be handed over already serialized (``bytes``), and are then sent as they are.

Why: a FetchResponse is mostly its ``records`` (up to fetch_bytes_max of batches). Built as a
message, those bytes are copied into the message and copied again by SerializeToString; written as
the small fields' encoding followed by the ``records`` field's tag, length and bytes
(``conversions.fetch_response_wire``), they are copied once. Protobuf parsers accept fields in any
order, so clients see the same message. The streams' answers (ProduceStreamResponse,
LookupStreamResponse) may be handed over serialized too: the stream serializes each answer
itself, as grpc.aio would in the write's first step, to count its bytes against the bytes a
stream may hold (``streams.STREAM_HELD_BYTES_MAX``) without encoding it twice. The handlers are derived from the service descriptor, so a
method added to the .proto is registered here too (and a test compares the two registrations).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from seglog.v1 import log_service_pb2 as pb

from .operations import OPERATIONS

__all__ = ["SERVICE_NAME", "UnparseableRequest", "add_log_service", "method_handlers"]

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["LogService"].full_name
_SERVICE = pb.DESCRIPTOR.services_by_name["LogService"]


def _serialize_maybe_serialized(response: Any) -> bytes:
    if isinstance(response, bytes):
        return response
    return response.SerializeToString()


_MAY_BE_SERIALIZED = (pb.FetchResponse, pb.ProduceStreamResponse, pb.LookupStreamResponse)


def _serializer(message_class: Any) -> Callable[[Any], bytes]:
    if message_class in _MAY_BE_SERIALIZED:
        return _serialize_maybe_serialized
    return message_class.SerializeToString


class UnparseableRequest:
    """What a request that is not a valid message deserializes to. gRPC would answer such a
    request UNKNOWN or INTERNAL on its own; the boundary answers INVALID_ARGUMENT instead
    (boundary.py), saying which message failed to parse and why."""

    def __init__(self, message_name: str, reason: str) -> None:
        self.message_name = message_name
        self.reason = reason


def _deserializer(message_class: Any) -> Callable[[bytes], Any]:
    name = message_class.DESCRIPTOR.full_name

    def parse(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except DecodeError as exc:
            return UnparseableRequest(name, str(exc))

    return parse


def method_handlers(servicer: Any) -> dict[str, grpc.RpcMethodHandler]:
    handlers = {}
    for method in _SERVICE.methods:
        request_class = getattr(pb, method.input_type.name)
        response_class = getattr(pb, method.output_type.name)
        assert method.server_streaming or not method.client_streaming, (
            f"{method.name}: client streaming without server streaming is not served"
        )
        if method.name not in OPERATIONS:  # fail closed: no ACL operation, not served
            raise LookupError(f"{method.name} has no row in rpc/operations.py OPERATIONS")
        factory = _FACTORIES[method.client_streaming, method.server_streaming]
        handlers[method.name] = factory(
            getattr(servicer, method.name),
            request_deserializer=_deserializer(request_class),
            response_serializer=_serializer(response_class),
        )
    return handlers


_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_log_service(servicer: Any, server: grpc.aio.Server) -> None:
    handlers = method_handlers(servicer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
