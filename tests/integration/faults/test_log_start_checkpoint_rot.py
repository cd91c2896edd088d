"""A rotted digit in log-start-offset-checkpoint, then a restart of the real process: the partition
whose log start now lies above its log end keeps every file and stays offline with the reason
(the checkpoint, both offsets, the fix), every other partition serves, and the documented fix
brings every record back. Before, the load deleted every segment of the partition."""

from __future__ import annotations

import os
import signal

import grpc
import pytest
from tests.support.integration_helpers import make_batch, records_of, rpc_error

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
RPC_TIMEOUT_S = 30
CHECKPOINT = "log-start-offset-checkpoint"


def _values(stub, topic: str, partition: int, offset: int) -> list[bytes]:
    values = []
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=partition, offset=offset, max_bytes=1 << 20),
                              timeout=RPC_TIMEOUT_S)
        fresh = [r for r in records_of(response) if r.offset >= offset]
        if not fresh:
            return values
        values.extend(r.value for r in fresh)
        offset = fresh[-1].offset + 1


def _value(partition: int, index: int) -> bytes:
    return b"%d-%03d-" % (partition, index) + b"x" * 100  # 100 records: several 4 KiB segments


def _files(partition_dir) -> dict[str, bytes]:
    return {name: (partition_dir / name).read_bytes() for name in sorted(os.listdir(partition_dir))
            if name.endswith(".log")}  # the indexes of an unclean stop's active segment are trimmed


@pytest.mark.parametrize("stop", ["sigterm", "kill"])
def test_a_log_start_rotted_above_the_log_end_keeps_every_record(start_service, stop):
    service = start_service(["--no-malloc-tuning"])
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="rot", partitions=2, configs={"segment.bytes": "4096"}),
                     timeout=RPC_TIMEOUT_S)
    for partition in range(2):
        for first in range(0, 100, 10):
            stub.Produce(pb.ProduceRequest(topic="rot", partition=partition, acks=pb.ACKS_FSYNCED,
                                           records=make_batch([_value(partition, i)
                                                               for i in range(first, first + 10)])),
                         timeout=RPC_TIMEOUT_S)
    stub.DeleteRecords(pb.DeleteRecordsRequest(topic="rot", partition=0, offset=10), timeout=RPC_TIMEOUT_S)
    expected = [_value(0, i) for i in range(10, 100)]
    assert _values(stub, "rot", 0, 10) == expected
    data = service.data_dirs[0]
    assert service.stop() == 0  # writes the checkpoint
    if stop == "kill":  # a start that ends in kill -9: the next load recovers (no marker)
        service.start()
        service.signal(signal.SIGKILL)
        service.wait()
    text = (data / CHECKPOINT).read_text()
    assert "rot 0 10\n" in text
    (data / CHECKPOINT).write_text(text.replace("rot 0 10\n", "rot 0 910\n"))  # one digit rotted in
    kept = _files(data / "rot-0")
    assert len(kept) > 1

    service.start()
    stub = service.stub
    error = rpc_error(stub.Fetch, pb.FetchRequest(topic="rot", partition=0, offset=10), grpc.StatusCode.UNAVAILABLE,
                      "offline")
    for named in ("log start offset 910", "log end offset 100", CHECKPOINT, "every file is kept"):
        assert named in error.details()
    assert _values(stub, "rot", 1, 0) == [_value(1, i) for i in range(100)]
    assert "partition rot-0 stays offline, every other partition serves" in service.log()
    assert service.stop() == 0
    assert _files(data / "rot-0") == kept  # not one stored byte of the partition touched

    text = (data / CHECKPOINT).read_text()  # the documented fix: the line back to the real start
    (data / CHECKPOINT).write_text(text.replace("rot 0 910\n", "rot 0 10\n"))
    service.start()
    assert _values(service.stub, "rot", 0, 10) == expected
    assert service.stub.Produce(pb.ProduceRequest(topic="rot", partition=0, records=make_batch([b"next"])),
                                timeout=RPC_TIMEOUT_S).base_offset == 100
