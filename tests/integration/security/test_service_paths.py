"""No server path reaches an admin caller: ExplainLookup, ListCleanable and CreateSnapshot name
files by their log directory's label, through a real service. The one absolute path left is
CreateSnapshot's ``local_path``, sent only when asked for (the cleaner sharing the filesystem)."""

from __future__ import annotations

import pytest
from tests.support.integration_helpers import make_batch

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
           "file.delete.delay.ms": "0"}


def _no_server_path(text: str, service) -> None:
    assert not text.startswith("/"), text
    for data_dir in service.data_dirs:
        assert str(data_dir) not in text and str(data_dir.parent) not in text, text


def test_explain_cleanable_and_snapshot_answers_carry_no_server_path(start_service):
    service = start_service()
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="paths", partitions=1, configs=COMPACT), timeout=10)
    for n in range(60):
        stub.Produce(pb.ProduceRequest(topic="paths", partition=0, records=make_batch(
            [b"v" * 40], keys=[b"k%d" % (n % 3)])), timeout=10)
    explained = stub.ExplainLookup(pb.ExplainLookupRequest(topic="paths", partition=0, offset=5), timeout=10)
    assert explained.searches
    for search in explained.searches:
        _no_server_path(search.path, service)
        assert search.path.startswith("log dir #0 (") and search.path.endswith(".index"), search.path
    cleanable = stub.ListCleanable(pb.ListCleanableRequest(topic="paths"), timeout=10).partitions
    assert cleanable
    for partition in cleanable:
        _no_server_path(partition.log_dir, service)
    taken = stub.CreateSnapshot(pb.CreateSnapshotRequest(topic="paths", partition=0), timeout=30)
    _no_server_path(taken.log_dir, service)
    _no_server_path(taken.relative_path, service)
    assert taken.log_dir == "log dir #0 (data0)" and taken.local_path == ""
    asked = stub.CreateSnapshot(pb.CreateSnapshotRequest(topic="paths", partition=0, include_local_path=True),
                                timeout=30)
    assert asked.local_path == str(service.data_dirs[0] / asked.relative_path)
    for snapshot_id in (taken.snapshot_id, asked.snapshot_id):
        stub.DropSnapshot(pb.DropSnapshotRequest(snapshot_id=snapshot_id), timeout=10)
