"""A sealed segment's files cut short from outside a running service.

Something outside the process (an operator, a repair tool, another program) truncates one
partition's sealed ``.log`` and another sealed segment's ``.index`` while the service serves. A
read through a mapping past the file's end would be SIGBUS, killing the process and with it
every other partition. Here the reads of the damaged partition answer a clear status, the other
partition keeps serving (reads and appends), the process stays alive, and a restart recovers the
damaged partition: what survives the cut reads back, the cut offsets answer the lost range.
"""

from __future__ import annotations

import os

import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess, error_class, make_batch, records_of

from seglog.v1 import log_service_pb2 as pb

TOPIC = "cut"
BATCHES = 150
VALUE = b"v" * 200  # one record a batch, about 270 bytes: 45 batches a 12 KiB segment
CONFIGS = {"segment.bytes": str(12 * 1024), "index.interval.bytes": "256"}


def _produce(stub, partition: int, count: int) -> None:
    for _ in range(count):
        stub.Produce(pb.ProduceRequest(topic=TOPIC, partition=partition, records=make_batch([VALUE])), timeout=10)


def _fetch(stub, partition: int, offset: int):
    return stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=partition, offset=offset, max_bytes=1024), timeout=10)


def _all_values(stub, partition: int) -> list[bytes]:
    values: list[bytes] = []
    offset = 0
    while True:
        response = _fetch(stub, partition, offset)
        if response.next_offset == offset:
            return values
        values += [record.value for record in records_of(response) if record.offset >= offset]
        offset = response.next_offset


def _segments(data_dir, partition: int) -> list[str]:
    return sorted(name[: -len(".log")] for name in os.listdir(data_dir / f"{TOPIC}-{partition}") if name.endswith(".log"))


def _refused(call, code: grpc.StatusCode) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == code, f"{info.value.code()}: {info.value.details()}"
    return info.value


def test_a_segment_cut_from_outside_fails_its_reads_and_spares_the_service(tmp_path):
    data_dir = tmp_path / "data"
    service = ServiceProcess(tmp_path, [data_dir], []).start()
    try:
        stub = service.stub
        stub.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=2, configs=CONFIGS), timeout=30)
        for partition in (0, 1):
            _produce(stub, partition, BATCHES)
        segments = _segments(data_dir, 0)
        assert len(segments) >= 4, segments  # three sealed, one active
        second = int(segments[1])
        # Read both sealed segments once (each lookup uses its index and scans its log) ...
        assert len(_all_values(stub, 0)) == BATCHES
        late_in_first = second - 1  # its batch lies pages past the first 4 KiB of the first .log
        assert records_of(_fetch(stub, 0, late_in_first))[0].offset == late_in_first
        # ... then cut the first's .log to 100 bytes and the second's offset index to nothing.
        partition_dir = data_dir / f"{TOPIC}-0"
        os.truncate(partition_dir / f"{segments[0]}.log", 100)
        os.truncate(partition_dir / f"{segments[1]}.index", 0)

        cut_log = _refused(lambda: _fetch(stub, 0, late_in_first), grpc.StatusCode.DATA_LOSS)
        assert f"{segments[0]}.log: the file ends at" in cut_log.details(), cut_log.details()
        assert error_class(cut_log) == "CorruptSegmentError"
        cut_index = _refused(lambda: _fetch(stub, 0, second + 3), grpc.StatusCode.INTERNAL)
        assert f"{segments[1]}.index is 0 bytes long" in cut_index.details(), cut_index.details()
        assert error_class(cut_index) == "CorruptIndexError"

        assert service.process.poll() is None, service.log()  # alive
        assert _all_values(stub, 1) == [VALUE] * BATCHES  # the other partition reads ...
        _produce(stub, 1, 1)  # ... and takes appends
        assert len(_all_values(stub, 1)) == BATCHES + 1
        assert records_of(_fetch(stub, 0, BATCHES - 1))[0].offset == BATCHES - 1  # the active segment too
    finally:
        stopped = service.stop()
    assert stopped == 0, service.log()  # a clean stop, the cut index included

    restarted = ServiceProcess(tmp_path, [data_dir], []).start()
    try:
        stub = restarted.stub
        # The second segment's index is rebuilt: its offsets read again.
        assert records_of(_fetch(stub, 0, second + 3))[0].offset == second + 3
        # The cut log lost what lay past byte 100 (no whole batch): its offsets answer the range.
        lost = _refused(lambda: _fetch(stub, 0, late_in_first), grpc.StatusCode.DATA_LOSS)
        assert error_class(lost) == "OffsetsLostError", lost.details()
        assert records_of(_fetch(stub, 0, second))[0].offset == second
        assert len(_all_values(stub, 1)) == BATCHES + 1
    finally:
        assert restarted.stop() == 0, restarted.log()
