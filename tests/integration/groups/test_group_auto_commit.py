"""Auto-commit keeps its own interval (Kafka's auto.commit.interval.ms), whatever the heartbeat
interval the service asks for: a member reading with a 100 ms auto-commit interval has its
position committed long before its next heartbeat is due."""

from __future__ import annotations

import pytest
from group_process_support import admin_of, produce, wait_until

from seglog import GroupConsumer
from seglog.v1 import log_service_pb2 as pb

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HEARTBEAT_MS = 8000  # 80 auto-commit intervals
AUTO_COMMIT_MS = 100


def test_auto_commit_follows_its_own_interval_not_the_heartbeats(start_service, closing):
    service = start_service(["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "30000",
                             "--group-heartbeat-interval-ms", str(HEARTBEAT_MS)])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="auto-orders", partitions=1), timeout=10)
    produce(service.stub, "auto-orders", 1, 10)
    admin = closing(admin_of(service))
    with GroupConsumer(service.address, group_id="g-auto", topics=["auto-orders"], session_timeout_ms=30000,
                       auto_commit_interval_ms=AUTO_COMMIT_MS, auto_offset_reset="earliest") as consumer:
        read: list = []
        wait_until(lambda: read.extend(consumer.poll(50)) or len(read) == 10, "the ten records")

        def committed() -> bool:
            consumer.poll(50)
            return [p.committed_offset for p in admin.describe_group("g-auto").partitions] == [10]

        # Forty auto-commit intervals, half a heartbeat interval: a bound, not a speed figure.
        wait_until(committed, "the auto-commit of the position", bound_s=40 * AUTO_COMMIT_MS / 1000)
