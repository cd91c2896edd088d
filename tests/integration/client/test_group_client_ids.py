"""A group member's client.id and host, as Kafka keeps them in the member's metadata: the consumer
sends its ``client_id`` (Kafka's default ``consumer-<group>-<n>``) on every heartbeat, the service
adds the address it saw the heartbeat from, and DescribeGroup (``Admin.describe_group``) shows
both (the member's records keep them across a restart: test_membership_replay.py)."""

from __future__ import annotations

import re
import time

import pytest
from tests.support.integration_helpers import ServiceProcess

from seglog import Admin, Consumer
from seglog.group_consumer import AsyncGroupConsumer
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

GROUP_ARGS = ["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "30000",
              "--group-heartbeat-interval-ms", "200"]
BOUND_S = 30  # a bound on a hang, not a speed assertion


def members_when(address: str, group: str, count: int):
    deadline = time.monotonic() + BOUND_S
    while True:
        with Admin(address) as admin:
            members = admin.describe_group(group).members
        if len(members) == count:
            return members
        assert time.monotonic() < deadline, f"{len(members)} members of {count} after {BOUND_S} s"
        time.sleep(0.05)


def test_members_show_their_client_id_and_host(tmp_path):
    service = ServiceProcess(tmp_path, [tmp_path / "data0"], GROUP_ARGS).start()
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="ids", partitions=2), timeout=10)
        with Consumer(service.address, group_id="ids-group", topics=["ids"], client_id="billing-7",
                      enable_auto_commit=False) as named, \
                Consumer(service.address, group_id="ids-group", topics=["ids"], enable_auto_commit=False) as default:
            named.poll(timeout_ms=10)
            default.poll(timeout_ms=10)
            shown = sorted((m.client_id, m.host) for m in members_when(service.address, "ids-group", 2))
        assert shown[0] == ("billing-7", "/127.0.0.1")
        assert re.fullmatch(r"consumer-ids-group-\d+", shown[1][0]) and shown[1][1] == "/127.0.0.1"
    finally:
        assert service.stop() == 0, service.log()


def test_the_default_client_ids_count_the_process_group_consumers():
    first, second = (AsyncGroupConsumer("127.0.0.1:1", group_id="g", topics=["t"]) for _ in range(2))
    numbers = [int(member.client_id.rsplit("-", 1)[1]) for member in (first, second)]
    assert first.client_id.startswith("consumer-g-") and numbers[1] == numbers[0] + 1
    assert AsyncGroupConsumer("127.0.0.1:1", group_id="g", topics=["t"], client_id="mine").client_id == "mine"
