"""Admin calls against a real service."""

from __future__ import annotations

import pytest

from seglog import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Admin,
    OffsetAndTimestamp,
    Producer,
    TopicPartition,
)
from seglog.errors import InvalidRequestError, TopicNotFoundError

pytestmark = pytest.mark.integration


def test_create_list_describe_delete(seglog_service):
    with Admin(seglog_service.address) as admin:
        info = admin.create_topic("admin-events", 3, {"retention.ms": 86_400_000, "segment.bytes": "1048576"})
        assert (info.topic, info.partitions) == ("admin-events", 3)
        assert info.configs["retention.ms"] == "86400000" and info.configs["segment.bytes"] == "1048576"
        assert "cleanup.policy" in info.configs  # every effective config comes back
        listed = {t.topic: t.partitions for t in admin.list_topics()}
        assert listed["admin-events"] == 3
        description = admin.describe_topic("admin-events")
        assert [p.partition for p in description.partitions] == [0, 1, 2]
        assert all(p.log_end_offset == 0 and p.segment_count >= 1 for p in description.partitions)
        # Named by its place in data_dirs and its own name, never by its server path.
        name = seglog_service.data_dir.name
        assert description.partitions[0].log_dir == f"log dir #0 ({name})"
        assert description.configs["retention.ms"] == "86400000"
        admin.delete_topic("admin-events")
        assert "admin-events" not in {t.topic for t in admin.list_topics()}


def test_list_topics_is_sorted_by_name(seglog_service):
    with Admin(seglog_service.address) as admin:
        for name in ("zz-sorted", "aa-sorted", "mm-sorted"):
            admin.create_topic(name)
        names = [t.topic for t in admin.list_topics()]
    assert names == sorted(names)


def test_validate_only_creates_nothing(seglog_service):
    with Admin(seglog_service.address) as admin:
        info = admin.create_topic("admin-dry-run", 4, validate_only=True)
        assert info.partitions == 4
        assert "admin-dry-run" not in {t.topic for t in admin.list_topics()}


def test_describe_reports_offsets_and_sizes_after_produce(seglog_service, make_topic):
    topic = make_topic(partitions=2)
    with Producer(seglog_service.address) as producer:
        for i in range(7):
            producer.send(topic, b"x" * 100, partition=1)
    with Admin(seglog_service.address) as admin:
        partitions = admin.describe_topic(topic).partitions
    assert (partitions[1].log_start_offset, partitions[1].log_end_offset, partitions[1].high_watermark) == (0, 7, 7)
    assert partitions[1].size_bytes > 700 and partitions[0].size_bytes == 0


def test_offsets_for_times_and_the_special_targets(seglog_service, make_topic):
    topic = make_topic(partitions=2)
    with Producer(seglog_service.address) as producer:
        for ts in (1000, 3000, 2000):
            producer.send(topic, str(ts).encode(), partition=0, timestamp_ms=ts).result()
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Admin(seglog_service.address) as admin:
        found = admin.offsets_for_times({tp0: 1500, tp1: 1500})
        assert found == {tp0: OffsetAndTimestamp(1, 3000), tp1: None}
        assert admin.offsets_for_times({tp0: 5000}) == {tp0: None}
        assert admin.offsets_for_times({tp0: EARLIEST_TIMESTAMP})[tp0].offset == 0
        assert admin.offsets_for_times({tp0: LATEST_TIMESTAMP})[tp0].offset == 3
        assert admin.offsets_for_times({tp0: MAX_TIMESTAMP})[tp0] == OffsetAndTimestamp(1, 3000)
        assert admin.earliest_offsets(topic) == {0: 0, 1: 0}
        assert admin.latest_offsets(topic, [0]) == {0: 3}
        assert admin.max_timestamp_offsets(topic) == {0: OffsetAndTimestamp(1, 3000), 1: None}


def test_offsets_for_times_many_answers_several_timestamps_per_partition_in_order(seglog_service, make_topic):
    topic = make_topic(partitions=2)
    with Producer(seglog_service.address) as producer:
        for ts in (1000, 3000, 2000, 4000):
            producer.send(topic, str(ts).encode(), partition=0, timestamp_ms=ts).result()
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    targets = [(tp0, 2500), (tp1, 0), (tp0, 500), (tp0, 2500), (tp0, 4001), (tp0, MAX_TIMESTAMP),
               (tp0, LATEST_TIMESTAMP), (tp1, EARLIEST_TIMESTAMP), (tp0, 3500)]
    with Admin(seglog_service.address) as admin:
        found = admin.offsets_for_times_many(targets)
        assert found == [OffsetAndTimestamp(1, 3000), None, OffsetAndTimestamp(0, 1000), OffsetAndTimestamp(1, 3000),
                         None, OffsetAndTimestamp(3, 4000), OffsetAndTimestamp(4, -1), OffsetAndTimestamp(0, -1),
                         OffsetAndTimestamp(3, 4000)]
        assert found == [admin.offsets_for_times({tp: ts})[tp] for tp, ts in targets]
        assert admin.offsets_for_times_many([]) == []
        with pytest.raises(InvalidRequestError, match=f"{topic}-0: .*-7"):
            admin.offsets_for_times_many([(tp1, 0), (tp0, -7), (TopicPartition(topic, 5), 0)])
        with pytest.raises(TopicNotFoundError, match=f"{topic}-5"):
            admin.offsets_for_times_many([(tp1, 0), (TopicPartition(topic, 5), 0), (tp0, 0)])


def test_delete_records_moves_the_log_start_offset(seglog_service, make_topic):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    with Producer(seglog_service.address) as producer:
        for i in range(5):
            producer.send(topic, b"r", partition=0).result()
    with Admin(seglog_service.address) as admin:
        assert admin.delete_records({tp: 3}) == {tp: 3}
        assert admin.earliest_offsets(topic) == {0: 3}
        assert admin.describe_topic(topic).partitions[0].log_start_offset == 3
        assert admin.delete_records({tp: -1}) == {tp: 5}  # -1: up to the high watermark
