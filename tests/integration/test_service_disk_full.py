"""A real full disk: the service runs on a small tmpfs the test mounts, producers fill it.

What must hold (docs/reliability.md, "Full disk and exhausted descriptors"): produce answers a
retriable RESOURCE_EXHAUSTED naming the full disk (no SIGBUS, no offline directory); reads,
ListTopics, DeleteRecords and DeleteTopic go on; health stays SERVING; produce resumes by itself
once DeleteTopic freed space; a restart, clean or after kill -9 on the still-full disk, loses no
acknowledged record.

Needs root to mount (as CI and the development machines run); skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tests.support.integration_helpers import error_class, make_batch, records_of

from seglog.v1 import log_service_pb2 as pb

TMPFS_BYTES = 4 * 1024 * 1024  # a few MiB: filled in a second or two
VALUE_BYTES = 2000
RECORDS_PER_BATCH = 8
SIGBUS_EXIT = -signal.SIGBUS


@contextlib.contextmanager
def small_tmpfs(path: pathlib.Path, size_bytes: int):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI and the dev machines run as root)")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
        capture_output=True, text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def produce(stub, topic: str, partition: int, values: list[bytes], acks=pb.ACKS_WRITTEN):
    request = pb.ProduceRequest(topic=topic, partition=partition, records=make_batch(values), acks=acks)
    return stub.Produce(request, timeout=10)


def values_for(topic: str, partition: int, number: int) -> list[bytes]:
    prefix = f"{topic}-{partition}-{number}-".encode()
    return [prefix + bytes([48 + i]) * VALUE_BYTES for i in range(RECORDS_PER_BATCH)]


def fill_until_full(stub, topics: list[str], acknowledged: dict[tuple[str, int], list[bytes]]) -> grpc.RpcError:
    """Produces round robin until the disk refuses; returns the refusal. Acknowledged after the
    write (the page cache survives kill -9; the flush at a clean stop is what is tested)."""
    number = 0
    while number < 10_000:
        for topic in topics:
            for partition in range(2):
                values = values_for(topic, partition, number)
                try:
                    produce(stub, topic, partition, values)
                except grpc.RpcError as error:
                    return error
                acknowledged.setdefault((topic, partition), []).extend(values)
        number += 1
    raise AssertionError("the tmpfs never filled up")


def fetch_all(stub, topic: str, partition: int) -> list[bytes]:
    values, offset = [], 0
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=partition, offset=offset,
                                              max_bytes=1 << 20), timeout=10)
        records = records_of(response)
        values.extend(record.value for record in records)
        if response.next_offset >= response.high_watermark:
            return values
        offset = response.next_offset


def health(service) -> int:
    stub = health_pb2_grpc.HealthStub(service.channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status


def check_all_acknowledged(stub, acknowledged) -> None:
    for (topic, partition), values in acknowledged.items():
        stored = fetch_all(stub, topic, partition)
        assert stored[: len(values)] == values, f"{topic}-{partition}: acknowledged records lost"


def test_a_full_disk_refuses_writes_serves_reads_and_recovers_after_delete_topic(start_service, tmp_path):
    with small_tmpfs(tmp_path / "mnt", TMPFS_BYTES) as mount:
        data_dir = mount / "data"
        args = ["--topic-default", "segment.bytes=1048576", "--maintenance-interval-ms", "200"]
        service = start_service(args=args, data_dirs=[data_dir], workdir=tmp_path / "work")
        stub = service.stub
        for topic in ("keep", "filler"):
            stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=2), timeout=10)

        acknowledged: dict[tuple[str, int], list[bytes]] = {}
        refusal = fill_until_full(stub, ["keep", "filler"], acknowledged)
        assert refusal.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refusal.details()
        assert "no space left" in refusal.details() and error_class(refusal) == "LogDirFullError"
        first_fill = sum(len(v) for v in acknowledged.values())
        assert first_fill > 100

        # Full, but not failed: every later write is refused the same way, reads go on.
        for _ in range(5):
            with pytest.raises(grpc.RpcError) as again:
                produce(stub, "keep", 0, values_for("keep", 0, 99_999))
            assert again.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert health(service) == health_pb2.HealthCheckResponse.SERVING
        assert {t.topic for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=10).topics} == {"keep", "filler"}
        check_all_acknowledged(stub, acknowledged)
        described = stub.DescribeTopic(pb.DescribeTopicRequest(topic="keep"), timeout=10)
        assert len(described.partitions) == 2  # both partitions online

        # The operator frees space through the API; produce resumes by itself.
        stub.DeleteRecords(pb.DeleteRecordsRequest(topic="filler", partition=0, offset=1), timeout=10)
        stub.DeleteTopic(pb.DeleteTopicRequest(topic="filler"), timeout=10)
        for key in [k for k in acknowledged if k[0] == "filler"]:
            del acknowledged[key]
        for number in range(5):
            for partition in range(2):
                values = values_for("keep", partition, 50_000 + number)
                produce(stub, "keep", partition, values)
                acknowledged[("keep", partition)].extend(values)
        check_all_acknowledged(stub, acknowledged)

        # Fill it again and restart cleanly on the full disk.
        stub.CreateTopic(pb.CreateTopicRequest(topic="filler2", partitions=2), timeout=10)
        fill_until_full(stub, ["keep", "filler2"], acknowledged)
        code = service.stop()
        assert code == 0, service.log()
        service.start()
        check_all_acknowledged(service.stub, acknowledged)
        assert health(service) == health_pb2.HealthCheckResponse.SERVING

        # kill -9 on the full disk, then a restart that has to recover: no SIGBUS, nothing lost.
        service.process.kill()
        assert service.process.wait(30) == -signal.SIGKILL
        service.channel.close()
        service.channel = None
        service.start()
        check_all_acknowledged(service.stub, acknowledged)
        service.stub.DeleteTopic(pb.DeleteTopicRequest(topic="filler2"), timeout=10)
        produce(service.stub, "keep", 0, values_for("keep", 0, 77_777))
        code = service.stop()
        assert code == 0 and code != SIGBUS_EXIT, service.log()
        assert "Traceback" not in service.log(), service.log()
        kept = sum(len(v) for v in acknowledged.values())
        print(f"tmpfs {TMPFS_BYTES} bytes: {first_fill} records acknowledged before the first "
              f"refusal; {kept} acknowledged records checked after a clean restart and a "
              f"kill -9 restart on the full disk: 0 lost")


# -- without the service: the mechanism itself on a real full file system ------------------------
_INDEX_ON_A_FULL_DISK = """
import errno, os, sys
from seglog_server.storage.format.offset_index import OffsetIndex
directory = sys.argv[1]
with open(os.path.join(directory, "ballast"), "wb") as ballast:
    try:
        while True:
            ballast.write(b"x" * 65536)
            ballast.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
index = OffsetIndex(os.path.join(directory, "0.index"), 0, 10 * 1024 * 1024)
try:
    for slot in range(100_000):
        index.append(slot, slot)
except OSError as exc:
    print("OSError", errno.errorcode[exc.errno], index.entry_count)
    sys.exit(0)
print("no error")
sys.exit(3)
"""


def test_index_stores_on_a_full_tmpfs_raise_oserror_instead_of_sigbus(tmp_path):
    """Before space was reserved, this process died of SIGBUS on its first index store."""
    with small_tmpfs(tmp_path / "mnt", 1024 * 1024) as mount:
        result = subprocess.run([sys.executable, "-c", _INDEX_ON_A_FULL_DISK, str(mount)],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
        assert result.stdout.startswith("OSError ENOSPC"), result.stdout
