"""DescribeTopic, Admin.describe_topic and ``seglog topic describe`` of a tiered topic on a real
service against a real weed: the log start, the local log start, the log end, and the local and
remote segments with their bytes, each held to what the data dir and the store hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from tests.support.integration_helpers import ServiceProcess
from tests.support.s3_server import CREDENTIALS_ENV

from seglog import Admin
from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.remote import ObjectStore, RemoteStorageManager

from tests.integration.remote.conftest import stored, BUCKET, store_config
from tests.integration.remote.test_service_tiered_reads import CALL_TIMEOUT_S, TIERED, produce, wait_until

pytestmark = pytest.mark.integration


def _local_segments(service: ServiceProcess, topic: str) -> dict[int, int]:
    """{base offset: .log bytes} of the partition's segments on disk."""
    directory = service.data_dirs[0] / f"{topic}-0"
    return {int(path.stem): path.stat().st_size for path in directory.glob("*.log")}


def _cli_describe(service: ServiceProcess, topic: str, *extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    done = subprocess.run([sys.executable, "-m", "seglog_cli", "--server", service.address, "topic", "describe",
                           topic, *extra], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_describe_shows_the_local_and_remote_extents_of_a_tiered_topic(weed, tmp_path):
    prefix = f"describe-{uuid.uuid4().hex[:10]}"
    rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, prefix)))
    data = tmp_path / "data"
    data.mkdir()
    service = ServiceProcess(tmp_path, [data], ["--remote-storage", f"s3://{BUCKET}/{prefix}",
                                                "--s3-endpoint", weed.endpoint], env=CREDENTIALS_ENV).start()
    try:
        stub = service.stub
        stub.CreateTopic(pb.CreateTopicRequest(topic="tiered", partitions=1, configs=TIERED), timeout=CALL_TIMEOUT_S)
        stub.CreateTopic(pb.CreateTopicRequest(topic="plain", partitions=1), timeout=CALL_TIMEOUT_S)
        produce(stub, "tiered", 16)
        produce(stub, "plain", 3)
        # Settled: every closed segment uploaded and deleted locally (local.retention.bytes=1), so
        # only the active one is on disk, right above the last remote segment.
        wait_until(lambda: len(_local_segments(service, "tiered")) == 1 and rsm.metadata.list(stored(rsm, "tiered", 0)) and max(
            m.end_offset for m in rsm.metadata.list(stored(rsm, "tiered", 0))) + 1 == min(_local_segments(service, "tiered")),
            "every closed segment uploaded and deleted locally")
        remote = rsm.metadata.list(stored(rsm, "tiered", 0))
        local = _local_segments(service, "tiered")
        answer = stub.DescribeTopic(pb.DescribeTopicRequest(topic="tiered"), timeout=CALL_TIMEOUT_S).partitions[0]

        assert answer.log_start_offset == 0
        assert answer.local_log_start_offset == min(local) > 0
        assert answer.log_end_offset == answer.high_watermark == 16
        assert (answer.local_segment_count, answer.local_size_bytes) == (len(local), sum(local.values()))
        assert (answer.segment_count, answer.size_bytes) == (answer.local_segment_count, answer.local_size_bytes)
        assert answer.remote_segment_count == len(remote)
        assert answer.remote_size_bytes == sum(m.segment_bytes for m in remote) > 0
        assert min(m.base_offset for m in remote) == 0

        plain = stub.DescribeTopic(pb.DescribeTopicRequest(topic="plain"), timeout=CALL_TIMEOUT_S).partitions[0]
        assert plain.local_log_start_offset == plain.log_start_offset == 0
        assert (plain.remote_segment_count, plain.remote_size_bytes) == (0, 0)
        assert plain.local_size_bytes == plain.size_bytes > 0

        with Admin(service.address) as admin:
            described = admin.describe_topic("tiered").partitions[0]
        assert (described.log_start_offset, described.local_log_start_offset, described.remote_segment_count,
                described.remote_size_bytes) == (0, answer.local_log_start_offset, answer.remote_segment_count,
                                                 answer.remote_size_bytes)

        as_json = json.loads(_cli_describe(service, "tiered", "--format", "json"))["partitions"][0]
        assert as_json["local_log_start_offset"] == answer.local_log_start_offset
        assert as_json["remote_segment_count"] == answer.remote_segment_count
        table = _cli_describe(service, "tiered").splitlines()
        header = next(line for line in table if line.startswith("PARTITION"))
        columns = header.split()  # LOG_DIR last, its cell holds spaces
        row = dict(zip(columns, table[table.index(header) + 1].split(maxsplit=len(columns) - 1), strict=True))
        assert row["LOG_START"] == "0" and row["LOCAL_START"] == str(answer.local_log_start_offset)
        assert row["REMOTE_SEGMENTS"] == str(answer.remote_segment_count)
        assert row["REMOTE_BYTES"] == str(answer.remote_size_bytes)
        assert row["LOCAL_BYTES"] == str(answer.local_size_bytes) and row["LOG_END"] == "16"
    finally:
        service.stop()
