"""Many partitions under a small descriptor limit: a real service process started with a lowered
RLIMIT_NOFILE (soft and hard, as ``ulimit -n`` sets them) loads every partition and serves
Produce and Fetch on each, while its open descriptors stay below the limit.

The partitions are laid out on disk through the storage layer, not by CreateTopic: one real
partition is made by a LogManager (create, produce, clean shutdown), then copied under new topic
names with their own topic.properties, so 10,000 partitions take seconds instead of minutes of
fsyncs. The service then starts on a directory that had a clean shutdown, as after an upgrade.

The 10,000-partition run under ``ulimit -n 1024`` is marked slow; the fast run does the same with
600 partitions under ``ulimit -n 256``.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys

import pytest
from tests.support import integration_helpers
from tests.support.fault_fs import NoSyncFs
from tests.support.integration_helpers import START_TIMEOUT_S, STOP_TIMEOUT_S, ServiceProcess, make_batch, records_of

from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.format.topic_metadata import TopicMetadata, new_topic_id, write_topic_metadata

PARTITIONS_PER_TOPIC = 1000
IN_FLIGHT = 8  # concurrent RPCs while touching every partition


def lay_out_partitions(data_dir: pathlib.Path, partition_count: int) -> list[tuple[str, int]]:
    """``partition_count`` partitions of one record each, ``t<i>-<p>``, ready for a clean start."""
    template_dir = data_dir.parent / "template"
    manager = LogManager([str(template_dir)])
    manager.startup()
    manager.create_topic("template", 1)
    manager.get_log("template", 0).append(make_batch([b"seed"]))
    manager.shutdown()
    template = template_dir / "template-0"
    segment_files = [name for name in os.listdir(template) if name != "topic.properties"]
    shutil.copytree(template_dir, data_dir, ignore=shutil.ignore_patterns("template-0", ".lock"))
    fs = NoSyncFs()
    partitions = []
    for topic_number in range(-(-partition_count // PARTITIONS_PER_TOPIC)):
        topic = f"t{topic_number}"
        count = min(PARTITIONS_PER_TOPIC, partition_count - topic_number * PARTITIONS_PER_TOPIC)
        metadata = TopicMetadata(topic, new_topic_id(), count)
        for partition in range(count):
            target = data_dir / f"{topic}-{partition}"
            target.mkdir()
            for name in segment_files:
                shutil.copyfile(template / name, target / name)
            write_topic_metadata(str(target), metadata, fs=fs)
            partitions.append((topic, partition))
    return partitions


def limit_descriptors(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply


class LimitedService(ServiceProcess):
    """A service process whose RLIMIT_NOFILE is ``limit`` (soft and hard) from its first line."""

    def __init__(self, *args, limit: int, start_timeout_s: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.limit = limit
        self.start_timeout_s = start_timeout_s

    def start(self) -> LimitedService:
        original = subprocess.Popen

        def popen(*args, **kwargs):
            return original(*args, preexec_fn=limit_descriptors(self.limit), **kwargs)

        subprocess.Popen = popen
        default_timeout_s = integration_helpers.START_TIMEOUT_S
        integration_helpers.START_TIMEOUT_S = self.start_timeout_s  # loading 10,000 logs
        try:
            return super().start()
        finally:
            subprocess.Popen = original
            integration_helpers.START_TIMEOUT_S = default_timeout_s

    def open_descriptor_count(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))


def touch_every_partition(service: LimitedService, partitions: list[tuple[str, int]]) -> int:
    """Produces one record to each partition and fetches both records back; returns the highest
    descriptor count seen along the way."""
    stub = service.stub

    def produce_and_fetch(topic_partition: tuple[str, int]) -> None:
        topic, partition = topic_partition
        value = f"{topic}-{partition}".encode()
        produced = stub.Produce(pb.ProduceRequest(topic=topic, partition=partition,
                                                  records=make_batch([value])), timeout=30)
        assert produced.base_offset == 1
        fetched = stub.Fetch(pb.FetchRequest(topic=topic, partition=partition, offset=0), timeout=30)
        assert [r.value for r in records_of(fetched)] == [b"seed", value]

    highest = service.open_descriptor_count()
    with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
        for number, _ in enumerate(pool.map(produce_and_fetch, partitions)):
            if number % 200 == 0:
                highest = max(highest, service.open_descriptor_count())
    return max(highest, service.open_descriptor_count())


def run_many_partitions(tmp_path: pathlib.Path, partition_count: int, limit: int) -> None:
    data_dir = tmp_path / "data"
    partitions = lay_out_partitions(data_dir, partition_count)
    # Loading takes about 1 ms per partition on an idle machine, several on a busy shared one.
    start_timeout_s = START_TIMEOUT_S + partition_count / 40
    service = LimitedService(tmp_path, [data_dir], [], limit=limit, start_timeout_s=start_timeout_s).start()
    try:
        topics = service.stub.ListTopics(pb.ListTopicsRequest(), timeout=60).topics
        assert sum(t.partitions for t in topics) == partition_count
        assert service.open_descriptor_count() < limit
        highest = touch_every_partition(service, partitions)
        assert highest < limit, f"{highest} descriptors open under a limit of {limit}"
        last_topic = topics[-1].topic
        described = service.stub.DescribeTopic(pb.DescribeTopicRequest(topic=last_topic), timeout=60)
        assert all(p.log_end_offset == 2 for p in described.partitions)
    finally:
        # Shutdown flushes every log (an fdatasync per file): minutes for 10,000 partitions on a
        # busy shared disk, so the wait is longer than the helpers' default.
        service.channel.close()
        service.channel = None
        service.signal(signal.SIGTERM)
        code = service.wait(timeout_s=STOP_TIMEOUT_S + partition_count / 50)
    assert code == 0, service.log()
    log = service.log()
    assert "is offline" not in log and "Too many open files" not in log, log
    assert f"descriptor limit {limit}:" in log
    print(f"{partition_count} partitions under RLIMIT_NOFILE {limit}: at most {highest} descriptors open")


def test_600_partitions_load_and_serve_under_ulimit_256(tmp_path):
    run_many_partitions(tmp_path, 600, 256)


@pytest.mark.slow
def test_10000_partitions_load_and_serve_under_ulimit_1024(tmp_path):
    run_many_partitions(tmp_path, 10_000, 1024)


_RAISES_ITS_LIMIT = """
import logging, resource, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
from seglog_server.resource_limits import open_segments_budget
budget = open_segments_budget(0)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
print("limit", soft, hard, "budget", budget)
"""


def test_the_service_raises_its_soft_descriptor_limit_to_the_hard_one_and_says_so():
    def lower_soft_limit() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, min(hard, 4096)))

    result = subprocess.run([sys.executable, "-c", _RAISES_ITS_LIMIT], capture_output=True,
                            text=True, preexec_fn=lower_soft_limit, timeout=60)
    assert result.returncode == 0, result.stderr
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)
    assert f"raised the descriptor limit (RLIMIT_NOFILE) from 256 to {hard}" in result.stdout
    assert f"limit {hard} {hard} budget {(hard - max(256, hard // 4)) // 4}" in result.stdout
