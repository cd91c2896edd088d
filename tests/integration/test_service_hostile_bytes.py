"""Hostile bytes against a real service: rotted segments answer DATA_LOSS (Fetch, Consume and
``seglog consume``), decompression bombs are refused without the memory they ask for, and the
service keeps serving other clients throughout."""

from __future__ import annotations

import os
import pathlib
import struct
import subprocess
import sys
import threading
import zlib

import grpc
import psutil
import pytest
import zstandard
from tests.support.integration_helpers import assert_serving, error_class, make_batch, rpc_error, service_environment

from seglog import records as codec
from seglog.records.varint import encode_varint, encode_varlong
from seglog.v1 import log_service_pb2 as pb

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
TARGETS = [1000 + step for step in range(0, 125, 4)]  # the timed topic's records: 1000-1119, and past them


def _segment_of(service, topic: str) -> pathlib.Path:
    for data_dir in service.data_dirs:
        path = pathlib.Path(data_dir) / f"{topic}-0" / "00000000000000000000.log"
        if path.exists():
            return path
    raise AssertionError(f"no first segment of {topic}")


def _filled_topic(service, topic: str, *, timed: bool = False) -> pathlib.Path:
    """Topic ``topic`` of 40 batches of three records over segments of 2 KiB: its first segment.
    ``timed``: the records' timestamps a millisecond apart from 1000 (else the batch builder's)."""
    service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1, configs={"segment.bytes": "2048"}))
    for index in range(40):
        timestamps = [1000 + 3 * index + i for i in range(3)] if timed else None
        batch = make_batch([b"a" * 30, b"b" * 30, b"c" * 30], timestamps=timestamps)
        service.stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=batch))
    return _segment_of(service, topic)


def _poke(path: pathlib.Path, position: int, packed: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, packed, position)
    finally:
        os.close(fd)


def _third_batch_position(path: pathlib.Path) -> int:
    batches = list(codec.iter_batches(path.read_bytes()))
    return batches[2].position


def _rot_third_batch_length(path: pathlib.Path) -> None:
    """The segment's third batch claims 100,000 bytes: past the segment's end."""
    _poke(path, _third_batch_position(path) + codec.LENGTH_OFFSET, _INT32.pack(100_000))


def _lookups(service, topic: str, targets: list[int]) -> list[tuple[int, int, str]]:
    """OffsetsForTimes of ``targets`` in one request: (offset, error code, error class) each."""
    request = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=topic, partition=0, timestamp_ms=t) for t in targets])
    return [(r.offset, r.error.code, r.error.error_class)
            for r in service.stub.OffsetsForTimes(request, timeout=10).results]


def _fetch_everything(stub, topic: str) -> None:
    offset = 0
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=offset, max_bytes=1500), timeout=10)
        if not response.records:
            return
        offset = response.next_offset


@pytest.mark.parametrize("field", ["length", "base_offset"])
def test_a_rotted_older_segment_answers_data_loss_on_fetch_consume_and_the_cli(start_service, field):
    service = start_service()
    topic = f"rotted-{field.replace('_', '-')}"
    path = _filled_topic(service, topic)
    if field == "length":
        _rot_third_batch_length(path)
    else:
        _poke(path, _third_batch_position(path), _INT64.pack(5_000))  # inside a later segment's range
    with pytest.raises(grpc.RpcError) as raised:
        _fetch_everything(service.stub, topic)
    assert raised.value.code() == grpc.StatusCode.DATA_LOSS
    assert f"partition {topic}-0" in raised.value.details() and "offset" in raised.value.details()
    assert error_class(raised.value) == "CorruptSegmentError"

    stream = service.stub.Consume(pb.ConsumeRequest(topic=topic, partition=0, max_bytes=1500), timeout=10)
    with pytest.raises(grpc.RpcError) as raised:
        for _ in stream:
            pass
    assert raised.value.code() == grpc.StatusCode.DATA_LOSS

    cli = subprocess.run(
        [sys.executable, "-m", "seglog_cli", "--server", service.address, "consume", topic, "--from-beginning"],
        capture_output=True, text=True, timeout=60, env=service_environment(),
    )
    assert cli.returncode != 0
    errors = cli.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("seglog: error:") and topic in errors[0], cli.stderr
    assert_serving(service.stub)


def test_a_rotted_batch_fails_only_the_time_lookups_whose_scan_reaches_it(start_service):
    """OffsetsForTimes with many targets of one partition searches them together; when that
    search meets a rotted batch, each target is answered as if asked alone: DATA_LOSS for the
    targets whose scan reaches the batch, their offsets for the others."""
    service = start_service()
    topic = "rotted-lookups"
    path = _filled_topic(service, topic, timed=True)
    # A segment's time-step table fed by the appends answers from memory what the service wrote
    # (storage/segment/time_steps.py): the rot is met by the searches that read the file and by
    # a table built from it. So the service restarts (no table for the sealed segments), a first
    # lookup runs the segments' first-use checks, then the batch rots under the running service.
    assert service.stop() == 0
    service = start_service(data_dirs=[pathlib.Path(d) for d in service.data_dirs])
    _lookups(service, topic, [1000])
    _rot_third_batch_length(path)
    together = _lookups(service, topic, TARGETS)
    assert together == [_lookups(service, topic, [t])[0] for t in TARGETS]
    codes = {code for _, code, _ in together}
    assert codes == {0, grpc.StatusCode.DATA_LOSS.value[0]}  # some answered, some refused
    assert {error for _, code, error in together if code} == {"CorruptSegmentError"}
    assert_serving(service.stub)


def test_under_a_running_service_time_lookups_answer_a_rotted_batch_from_the_tables_and_fetch_fails(start_service):
    """The trade-off of the time-step tables fed by the appends (docs/reliability.md, "Lookups
    by time and rot under a running service"): a batch that rots under the running service after
    it was written is not seen by the lookups by time (a target's step is in memory; no read of
    the .log), which answer what the service wrote, batched and single alike; a Fetch reading the
    batch answers DATA_LOSS as before. The test above holds the restarted service's answers."""
    service = start_service()
    topic = "rotted-running"
    path = _filled_topic(service, topic, timed=True)
    written = _lookups(service, topic, TARGETS)
    assert written == [(t - 1000 if t < 1120 else -1, 0, "") for t in TARGETS]  # a record a ms, 1000-1119
    _rot_third_batch_length(path)
    assert _lookups(service, topic, TARGETS) == written  # the rotted batch's targets (1006-1008) included
    assert [_lookups(service, topic, [t])[0] for t in TARGETS] == written
    with pytest.raises(grpc.RpcError) as raised:
        _fetch_everything(service.stub, topic)
    assert raised.value.code() == grpc.StatusCode.DATA_LOSS
    assert error_class(raised.value) == "CorruptSegmentError"
    assert_serving(service.stub)


# -- decompression bombs -------------------------------------------------------------------------

BOMB_VALUE_BYTES = 256 * 1024 * 1024
_STEP = bytes(1024 * 1024)


def _record_prefix() -> bytes:
    """One record's bytes up to its value: a 256 MiB value of zeros follows (no key, no headers)."""
    body_bytes = 1 + 1 + 1 + 1 + len(encode_varint(BOMB_VALUE_BYTES)) + BOMB_VALUE_BYTES + 1
    return encode_varint(body_bytes) + b"\x00" + encode_varlong(0) + encode_varint(0) + encode_varint(-1) + encode_varint(BOMB_VALUE_BYTES)


def _compressed_bomb(compression: codec.Compression) -> bytes:
    """The records area compressed as a stream (never 256 MiB in this process)."""
    if compression is codec.Compression.ZSTD:
        compressor = zstandard.ZstdCompressor(level=3).compressobj()
        flush = compressor.flush
    else:
        compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        flush = compressor.flush
    parts = [compressor.compress(_record_prefix())]
    for _ in range(BOMB_VALUE_BYTES // len(_STEP)):
        parts.append(compressor.compress(_STEP))
    parts.append(compressor.compress(b"\x00"))  # headersCount
    parts.append(flush())
    return b"".join(parts)


def _bomb_batch(compression: codec.Compression) -> bytes:
    template = bytearray(make_batch([b"v"]))
    area = _compressed_bomb(compression)
    data = bytearray(template[: codec.RECORDS_OFFSET]) + area
    _INT32.pack_into(data, codec.LENGTH_OFFSET, len(data) - codec.LOG_OVERHEAD)
    struct.pack_into(">h", data, codec.ATTRIBUTES_OFFSET, int(compression))
    struct.pack_into(">I", data, codec.CRC_OFFSET, codec.crc32c(bytes(data[codec.ATTRIBUTES_OFFSET :])))
    assert codec.RecordBatch(bytes(data)).is_valid()
    return bytes(data)


@pytest.mark.parametrize(
    "compression",
    # gzip needs a second of CPU per bomb to build and to refuse: 20 of them belong to the slow run.
    [codec.Compression.ZSTD, pytest.param(codec.Compression.GZIP, marks=pytest.mark.slow)],
    ids=["zstd", "gzip"],
)
def test_decompression_bombs_are_refused_while_other_clients_are_served_and_memory_stays_bounded(
    start_service, compression
):
    service = start_service()
    stub = service.stub
    topic = f"bombs-{compression.name.lower()}"
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1))
    bomb = _bomb_batch(compression)
    assert len(bomb) < 300_000  # zstd: about 8 KiB; gzip: about 250 KiB, both for 256 MiB
    rpc_error(
        stub.Produce, pb.ProduceRequest(topic=topic, partition=0, records=bomb),
        grpc.StatusCode.INVALID_ARGUMENT, "decompressed_bytes_max",
    )
    process = psutil.Process(service.process.pid)
    rss_before = process.memory_info().rss
    peak = [rss_before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            done.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        flood = [
            stub.Produce.future(pb.ProduceRequest(topic=topic, partition=0, records=bomb), timeout=120)
            for _ in range(20)
        ]
        # Another client, meanwhile: its produces and listings are answered.
        for index in range(5):
            stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=make_batch([b"ok%d" % index])), timeout=60)
            assert_serving(stub)
        codes = [future.exception().code() for future in flood]
    finally:
        done.set()
        sampler.join()
    assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT}
    fetched = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=0), timeout=10)
    assert [r.value for r in codec.RecordBatch(fetched.records).records()] == [b"ok0"]
    # 20 bombs of 256 MiB each: without the cap that is gigabytes; with it each pool thread
    # holds at most decompressed_bytes_max (16 MiB) and a step.
    assert peak[0] - rss_before < 400 * 1024 * 1024, (rss_before, peak[0])
    assert_serving(stub)
