"""Moving a partition between real service processes against a real etcd (conftest.py).

A move under continuous produce by an idempotent Producer bootstrapped with both instances loses
and duplicates nothing: every acknowledged offset once, contiguous, at the target with the same
batch CRCs as the source's files; the producer follows the new owner. Moves to an unknown or dead
instance, moves naming a source that does not own the partition, and a move while etcd is frozen
(SIGSTOP) are refused cleanly and leave the owner where it was.
"""

from __future__ import annotations

import pathlib
import struct
import threading

import grpc
import pytest

from seglog import Producer
from seglog.errors import SeglogError
from seglog.v1 import log_service_pb2 as pb
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _start, _until, services
from tests.support.integration_helpers import records_of

__all__ = ["services"]

TOPIC = "moved"
SEGMENT_BYTES = 16384


def _batches(data: bytes) -> list[tuple[int, int]]:
    """(base offset, CRC) of each v2 batch in a segment file's bytes."""
    found, position = [], 0
    while position + 21 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, position)
        (crc,) = struct.unpack_from(">I", data, position + 17)
        found.append((base_offset, crc))
        position += 12 + length
    return found


def _segment_batches(data_dir: pathlib.Path, closed_only: bool = False) -> list[tuple[int, int]]:
    partition_dir = data_dir / f"{TOPIC}-0"
    paths = sorted(partition_dir.glob("*.log"))
    batches = []
    for path in paths[:-1] if closed_only else paths:
        batches += _batches(path.read_bytes())
    return batches


def _fetch_all(service, end: int) -> list:
    records, offset = [], 0
    while offset < end:
        fetched = service.stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=0, offset=offset), timeout=10)
        page = records_of(fetched)
        assert page, f"nothing at offset {offset} of {end}"
        records += page
        offset = page[-1].offset + 1
    return records


@pytest.mark.slow  # three service processes, a move under produce, a frozen etcd: ~20 s
def test_a_move_under_idempotent_produce_loses_and_duplicates_nothing_and_refusals_leave_the_owner(
        tmp_path, etcd, services, closing, two_instances):
    # Small segments: a few hundred records make closed segments (copied under produce) and a tail.
    cluster = f"move{next(_names)}"
    a, b, admin = two_instances(cluster, TOPIC, configs={"segment.bytes": str(SEGMENT_BYTES)})

    acknowledged: list = []
    stop = threading.Event()
    failures: list = []

    def produce() -> None:
        with Producer(f"{a.address},{b.address}", linger_ms=1) as producer:
            n = 0
            while not stop.is_set():
                values = [f"v{n + i}".encode().ljust(200, b".") for i in range(50)]
                futures = [producer.send(TOPIC, value, partition=0) for value in values]
                n += 50
                for value, future in zip(values, futures):
                    try:
                        acknowledged.append((value, future.result(timeout=60)))
                    except Exception as exc:  # noqa: BLE001 - collected and asserted on below
                        failures.append(exc)

    producer_thread = threading.Thread(target=produce)
    producer_thread.start()
    try:
        _until(lambda: len(acknowledged) >= 300, what="records produced before the move")
        # The source's closed segments, read before the move (they change no more; its copy is
        # dropped once the move commits).
        at_source = _segment_batches(a.data_dirs[0], closed_only=True)
        move = admin.move_partition(TOPIC, 0, to="b", from_instance="a")
        moved_at = len(acknowledged)
        _until(lambda: len(acknowledged) >= moved_at + 200, what="records produced after the move")
    finally:
        stop.set()
        producer_thread.join()
    assert not failures, failures[:3]
    assert (move.from_instance, move.to_instance, move.epoch) == ("a", "b", 1)
    assert move.bytes_copied > 2 * SEGMENT_BYTES  # closed segments and the tail
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "b"

    # Every acknowledged offset once, contiguous from 0; each record once at the target, in order.
    offsets = sorted(m.offset for _, m in acknowledged)
    assert offsets == list(range(len(offsets)))
    stored = _fetch_all(b, len(offsets))
    assert [r.offset for r in stored] == offsets
    values = [r.value for r in stored]
    assert len(set(values)) == len(values)  # no record twice (an idempotent retry deduplicated)
    # Each offset holds at the target the very value it was acknowledged for.
    acknowledged_at = {m.offset: value for value, m in acknowledged}
    assert {r.offset: r.value for r in stored} == acknowledged_at

    # The batches the move copied are byte-for-byte the source's: same base offsets, same CRCs.
    at_target = [batch for batch in _segment_batches(b.data_dirs[0]) if batch[0] < move.log_end_offset]
    assert at_source and at_target[:len(at_source)] == at_source
    assert at_target[-1][0] < move.log_end_offset <= offsets[-1] + 1
    # The source drops its copy (owned by b at a later epoch now).
    _until(lambda: not _segment_batches(a.data_dirs[0]), what="the source's copy dropped")

    # The old owner refuses with the new owner's hint.
    with pytest.raises(grpc.RpcError) as refused:
        a.stub.Produce(pb.ProduceRequest(topic=TOPIC, partition=0, plain_records=[pb.PlainRecord(value=b"x")]),
                       timeout=10)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dict(refused.value.trailing_metadata())["seglog-owner-id"] == "b"

    # Refused clearly, the owner unchanged: an unknown instance, a source that does not own it.
    with pytest.raises(SeglogError) as unknown:
        admin.move_partition(TOPIC, 0, to="nowhere")
    assert unknown.value.code == grpc.StatusCode.NOT_FOUND and "'nowhere' is not known" in str(unknown.value)
    with pytest.raises(SeglogError) as not_owner:
        admin.move_partition(TOPIC, 0, to="a", from_instance="a")
    assert not_owner.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "owned by 'b', not by 'a'" in str(not_owner.value)

    # A dead instance (registered once, its lease revoked at stop): refused, not alive.
    c = _start(tmp_path, "c", _cluster_args(etcd, cluster, "c"))
    _until(lambda: any(i.instance_id == "c" and i.alive for i in admin.metadata().instances), what="c seen")
    c.stop()
    _until(lambda: any(i.instance_id == "c" and not i.alive for i in admin.metadata().instances), what="c gone")
    with pytest.raises(SeglogError) as dead:
        admin.move_partition(TOPIC, 0, to="c")
    assert dead.value.code == grpc.StatusCode.FAILED_PRECONDITION and "'c' is not alive" in str(dead.value)

    # etcd frozen: the move back fails UNAVAILABLE, and b still owns and serves the partition.
    etcd.pause()
    try:
        with pytest.raises(SeglogError) as frozen:
            admin.move_partition(TOPIC, 0, to="a", timeout_s=60)
        assert frozen.value.code == grpc.StatusCode.UNAVAILABLE, frozen.value
        assert "etcd unavailable" in str(frozen.value)
    finally:
        etcd.resume()
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "b"
    answer = b.stub.Produce(pb.ProduceRequest(topic=TOPIC, partition=0, plain_records=[pb.PlainRecord(value=b"y")]),
                            timeout=30)
    assert answer.base_offset == len(offsets)
    admin.close()
