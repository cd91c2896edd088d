"""A ProduceStream message carrying several batches (its ``produce`` and ``more``), against a real
service on loopback: each batch is appended or refused as a message of its own would be, in
order, and answered in its own slot; the idempotence rules hold batch by batch inside a message;
a message above the announced bound is refused whole and the stream goes on."""

from __future__ import annotations

import grpc
import pytest
from tests.support.integration_helpers import make_batch, records_of

from seglog.records import RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

_CODES = {code.value[0]: code for code in grpc.StatusCode}
BATCHES_KEY = "seglog-stream-batches-max"


def _message(cid: int, requests: list[pb.ProduceRequest]) -> pb.ProduceStreamRequest:
    message = pb.ProduceStreamRequest(correlation_id=cid)
    message.produce.CopyFrom(requests[0])
    for request in requests[1:]:
        message.more.add().CopyFrom(request)
    return message


def _request(topic: str, records: bytes, acks=pb.ACKS_WRITTEN) -> pb.ProduceRequest:
    return pb.ProduceRequest(topic=topic, partition=0, records=records, acks=acks)


def _outcomes(answer: pb.ProduceStreamResponse) -> list:
    """(code, base offset) of each batch of one answer, in order."""
    slots = [answer, *answer.more]
    return [
        (_CODES[slot.error.code], None) if slot.HasField("error") else (grpc.StatusCode.OK, slot.produce.base_offset)
        for slot in slots
    ]


def test_the_batches_of_a_message_are_appended_in_order_and_each_answered_in_its_slot(stub, topic):
    corrupt = bytearray(make_batch([b"x"]))
    corrupt[-1] ^= 0xFF  # its CRC no longer matches
    call = stub.ProduceStream(iter([
        _message(1, [
            _request(topic, make_batch([b"a", b"b"])),
            _request(topic, make_batch([b"c"]), pb.ACKS_FSYNCED),  # an answer that waits
            _request("no-such-topic", make_batch([b"lost"])),
            _request(topic, bytes(corrupt)),
            _request(topic, make_batch([b"d"])),
        ]),
        _message(2, [_request(topic, make_batch([b"e"]))]),  # one batch: no ``more`` answers
    ]), timeout=30)
    assert int(dict(call.initial_metadata())[BATCHES_KEY]) >= 2
    answers = list(call)
    assert [answer.correlation_id for answer in answers] == [1, 2]
    assert _outcomes(answers[0]) == [
        (grpc.StatusCode.OK, 0), (grpc.StatusCode.OK, 2), (grpc.StatusCode.NOT_FOUND, None),
        (grpc.StatusCode.DATA_LOSS, None), (grpc.StatusCode.OK, 3),
    ]
    assert answers[0].more[1].error.error_class == "UnknownTopicOrPartitionError"
    assert _outcomes(answers[1]) == [(grpc.StatusCode.OK, 4)]
    assert not answers[1].more
    fetched = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=0))
    assert [record.value for record in records_of(fetched)] == [b"a", b"b", b"c", b"d", b"e"]


def test_idempotence_holds_batch_by_batch_inside_a_message(stub, topic):
    pid = stub.InitProducerId(pb.InitProducerIdRequest(), timeout=10).producer_id

    def batch(sequence: int, *values: bytes) -> bytes:
        builder = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=sequence)
        for value in values:
            builder.append(value)
        return builder.build()

    answers = list(stub.ProduceStream(iter([_message(1, [
        _request(topic, batch(0, b"a", b"b")),
        _request(topic, batch(2, b"c")),
        _request(topic, batch(0, b"a", b"b")),  # a resend of the first: its first offsets
        _request(topic, batch(7, b"gap")),  # sequence 3 was never sent
        _request(topic, batch(3, b"d")),
    ])]), timeout=30))
    outcomes = _outcomes(answers[0])
    assert outcomes == [
        (grpc.StatusCode.OK, 0), (grpc.StatusCode.OK, 2), (grpc.StatusCode.OK, 0),
        (grpc.StatusCode.FAILED_PRECONDITION, None), (grpc.StatusCode.OK, 3),
    ]
    assert answers[0].more[2].error.error_class == "OutOfOrderSequenceError"
    fetched = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=0))
    assert [record.value for record in records_of(fetched)] == [b"a", b"b", b"c", b"d"]


def test_a_message_above_the_announced_bound_is_refused_whole_and_the_stream_goes_on(stub, topic):
    call = stub.ProduceStream(iter([
        _message(1, [_request(topic, make_batch([b"%d" % i])) for i in range(200)]),
        _message(2, [_request(topic, make_batch([b"after"]))]),
    ]), timeout=30)
    bound = int(dict(call.initial_metadata())[BATCHES_KEY])
    assert bound < 200
    answers = list(call)
    assert [answer.correlation_id for answer in answers] == [1, 2]
    assert _CODES[answers[0].error.code] is grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {bound} batches" in answers[0].error.message
    assert not answers[0].more
    assert answers[1].produce.base_offset == 0  # nothing of the refused message was appended
