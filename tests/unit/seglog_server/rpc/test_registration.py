import grpc

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.rpc.registration import SERVICE_NAME, add_log_service, method_handlers


class RecordingServer:
    """Stands in for grpc.aio.Server: keeps what the registration functions hand it."""

    def __init__(self):
        self.registered = {}
        self.generic = []

    def add_generic_rpc_handlers(self, handlers):
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, service_name, handlers):
        self.registered[service_name] = handlers


def _shape(handler):
    # The deserializer is ours (unparseable requests become UnparseableRequest), but it parses
    # a valid request into the same message as the generated one.
    probe = handler.request_deserializer(b"")
    return (handler.request_streaming, handler.response_streaming,
            type(probe), handler.unary_unary is not None,
            handler.unary_stream is not None)


def test_registers_the_same_methods_with_the_same_shapes_as_the_generated_code():
    servicer = pb_grpc.LogServiceServicer()
    ours, generated = RecordingServer(), RecordingServer()
    add_log_service(servicer, ours)
    pb_grpc.add_LogServiceServicer_to_server(servicer, generated)
    assert set(ours.registered) == set(generated.registered) == {SERVICE_NAME}
    mine, theirs = ours.registered[SERVICE_NAME], generated.registered[SERVICE_NAME]
    assert set(mine) == set(theirs)
    for name in theirs:
        assert _shape(mine[name]) == _shape(theirs[name]), name
    assert len(ours.generic) == 1


def test_fetch_responses_may_be_pre_serialized_bytes_and_messages_still_work():
    handlers = method_handlers(pb_grpc.LogServiceServicer())
    for name in ("Fetch", "Consume"):
        serialize = handlers[name].response_serializer
        message = pb.FetchResponse(records=b"abc", next_offset=3)
        assert serialize(message) == message.SerializeToString()
        assert serialize(b"already serialized") == b"already serialized"


def test_other_responses_use_their_own_message_serializer():
    handlers = method_handlers(pb_grpc.LogServiceServicer())
    response = pb.ProduceResponse(base_offset=4)
    assert handlers["Produce"].response_serializer(response) == response.SerializeToString()
    assert isinstance(handlers["Consume"], grpc.RpcMethodHandler)


def test_a_request_that_does_not_parse_becomes_an_unparseable_request():
    from seglog_server.rpc.registration import UnparseableRequest

    handlers = method_handlers(pb_grpc.LogServiceServicer())
    parsed = handlers["Fetch"].request_deserializer(b"\x00")
    assert isinstance(parsed, UnparseableRequest)
    assert parsed.message_name == "seglog.v1.FetchRequest"
    valid = pb.FetchRequest(topic="t", offset=5)
    assert handlers["Fetch"].request_deserializer(valid.SerializeToString()) == valid
