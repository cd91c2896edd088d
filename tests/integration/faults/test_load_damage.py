"""Damage done to a stopped service's files, then a restart of the real process: a torn active
segment after SIGTERM never makes the service hand out an offset again, and one partition that
cannot load answers UNAVAILABLE alone while every other partition serves. The operator is told
in the service's log."""

from __future__ import annotations

import os
import struct

import grpc
import pytest
from tests.support.integration_helpers import make_batch, records_of, rpc_error

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
Code = grpc.StatusCode
RPC_TIMEOUT_S = 30


def _produce(stub, topic: str, partition: int, values: list[bytes], acks=pb.ACKS_WRITTEN):
    return stub.Produce(pb.ProduceRequest(topic=topic, partition=partition, records=make_batch(values), acks=acks),
                        timeout=RPC_TIMEOUT_S)


def _read_all(stub, topic: str, partition: int) -> list:
    records, offset = [], 0
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=partition, offset=offset, max_bytes=1 << 20),
                              timeout=RPC_TIMEOUT_S)
        fresh = [r for r in records_of(response) if r.offset >= offset]
        if not fresh:
            return records
        records.extend(fresh)
        offset = fresh[-1].offset + 1


def _greatest_offset_in_files(partition_dir) -> int:
    greatest = -1
    for name in sorted(os.listdir(partition_dir)):
        if not name.endswith(".log"):
            continue
        data = (partition_dir / name).read_bytes()
        position = 0
        while len(data) - position >= 61:
            base, length = struct.unpack_from(">qi", data, position)
            if length < 49 or position + 12 + length > len(data):
                break
            greatest = max(greatest, base + struct.unpack_from(">i", data, position + 23)[0])
            position += 12 + length
    return greatest


def test_a_torn_active_segment_after_sigterm_never_reuses_an_offset(start_service, tmp_path):
    service = start_service(["--no-malloc-tuning"])
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="torn", partitions=1, configs={"segment.bytes": "65536"}),
                     timeout=RPC_TIMEOUT_S)
    for first in range(0, 20_000, 100):
        _produce(stub, "torn", 0, [b"value-%05d" % i for i in range(first, first + 100)])
    assert service.stop() == 0
    partition_dir = service.data_dirs[0] / "torn-0"
    active = sorted(p for p in os.listdir(partition_dir) if p.endswith(".log"))[-1]
    os.truncate(partition_dir / active, os.path.getsize(partition_dir / active) - 30)
    greatest = _greatest_offset_in_files(partition_dir)

    service.start()
    stub = service.stub
    records = _read_all(stub, "torn", 0)
    assert [r.value for r in records] == [b"value-%05d" % i for i in range(greatest + 1)]
    assert "although its files were trusted" in service.log()
    acked = _produce(stub, "torn", 0, [b"after the tear"], acks=pb.ACKS_FSYNCED)
    assert acked.base_offset == greatest + 1  # beyond every offset in the files
    for _ in range(2):  # later restarts keep it
        assert service.stop() == 0
        service.start()
    records = _read_all(service.stub, "torn", 0)
    assert (records[-1].offset, records[-1].value) == (acked.base_offset, b"after the tear")
    assert "seglog stopped cleanly" in service.log()


def test_one_partition_that_cannot_load_is_unavailable_alone_and_garbage_elsewhere_is_cut(start_service):
    service = start_service(["--no-malloc-tuning"])
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="mixed", partitions=3), timeout=RPC_TIMEOUT_S)
    for partition in range(3):
        _produce(stub, "mixed", partition, [b"p%d-%d" % (partition, i) for i in range(20)])
    assert service.stop() == 0
    data = service.data_dirs[0]
    # A file no loader pass can serve (its name is beyond int64), and garbage after a clean stop.
    (data / "mixed-1" / "99999999999999999999.log").write_bytes(b"\x00" * 100)
    with open(data / "mixed-2" / "00000000000000000000.log", "ab") as file:
        file.write(os.urandom(333))

    service.start()  # the first start serves: no exit 1 for everyone
    stub = service.stub
    for partition in (0, 2):
        assert [r.value for r in _read_all(stub, "mixed", partition)] == [
            b"p%d-%d" % (partition, i) for i in range(20)
        ]
        assert _produce(stub, "mixed", partition, [b"more"]).base_offset == 20
    rpc_error(stub.Fetch, pb.FetchRequest(topic="mixed", partition=1, offset=0), Code.UNAVAILABLE, "mixed-1")
    rpc_error(stub.Produce, pb.ProduceRequest(topic="mixed", partition=1, records=make_batch([b"x"])),
              Code.UNAVAILABLE, "offline")
    log = service.log()
    assert "partition mixed-1 stays offline, every other partition serves" in log
    assert "cut 333 invalid bytes" in log
    assert "recovery ran on 1 logs (1 segments, 333 bytes cut)" in log
