"""A service killed with -9 right after DeleteTopic: the restart deletes the topic's objects.
A service killed with -9 in the middle of an upload (the store holding the segment's PUT, a
store gone silent mid-upload) leaves an orphan: a COPY_SEGMENT_STARTED record and maybe objects.
The restarted service never reads it, copies the segment again under a new id and deletes the
orphan at its first remote pass (its grace set to 1 ms here). A service killed with -9 while it
deletes uploaded segments (local copies renamed .deleted, a remote one DELETE_SEGMENT_STARTED)
loses nothing acknowledged and never reads the half-deleted segment."""

from __future__ import annotations

import uuid

import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess, make_batch, records_of
from tests.support.s3_server import CREDENTIALS_ENV

from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.remote import ObjectStore, RemoteLogSegmentState, RemoteStorageManager

from seglog_server.storage.remote.remote_log_metadata import partition_prefix
from tests.integration.remote.conftest import stored, BUCKET, store_config
from tests.integration.remote.test_service_tiered_reads import CALL_TIMEOUT_S, TIERED, wait_until

pytestmark = pytest.mark.integration


def service_at(tmp_path, endpoint: str, prefix: str) -> ServiceProcess:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return ServiceProcess(tmp_path, [data], [
        "--remote-storage", f"s3://{BUCKET}/{prefix}", "--s3-endpoint", endpoint,
        "--remote-orphan-grace-ms", "1"], env=CREDENTIALS_ENV)


def test_kill_9_during_an_upload_leaves_an_orphan_the_restart_removes_unread(weed, proxy, tmp_path):
    prefix = f"crash-{uuid.uuid4().hex[:10]}"
    rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, prefix)))
    proxy.stall_put_matching = "/segments/"  # the first object PUT of a copy is held, unanswered
    service = service_at(tmp_path, proxy.endpoint, prefix).start()
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1, configs=TIERED))
        for index in range(12):
            service.stub.Produce(pb.ProduceRequest(topic="t", records=make_batch(
                [b"v%05d" % index + b"." * 400], keys=[b"k%d" % index])), timeout=CALL_TIMEOUT_S)
        assert proxy.stalled.wait(60), "the uploader never reached a segment's PUT"
        service.process.kill()
        service.process.wait()
    finally:
        service.stop()
    orphans = rsm.metadata.orphans(stored(rsm, "t", 0))
    assert [m.state for m in orphans] == [RemoteLogSegmentState.COPY_SEGMENT_STARTED]
    assert rsm.metadata.list(stored(rsm, "t", 0)) == []

    restarted = service_at(tmp_path, weed.endpoint, prefix).start()
    try:
        wait_until(lambda: rsm.metadata.orphans(stored(rsm, "t", 0)) == [] and rsm.metadata.list(stored(rsm, "t", 0)),
                   "the orphan deleted and the segment copied again")
        assert not [key for key in rsm.store.list(partition_prefix(stored(rsm, "t", 0))) if orphans[0].segment_id in key]
        assert orphans[0].segment_id not in {m.segment_id for m in rsm.metadata.list(stored(rsm, "t", 0))}
        answer = restarted.stub.Fetch(pb.FetchRequest(topic="t", offset=0), timeout=CALL_TIMEOUT_S)
        assert [r.key for r in records_of(answer)][:1] == [b"k0"]
        ends = restarted.stub.Fetch(pb.FetchRequest(topic="t", offset=11), timeout=CALL_TIMEOUT_S)
        assert records_of(ends)[-1].key == b"k11"  # nothing acknowledged lost
    finally:
        restarted.stop()


def test_kill_9_right_after_delete_topic_the_restart_deletes_its_objects(weed, proxy, tmp_path):
    # The store refuses (503) from the DeleteTopic on, so no remote pass of the first process can
    # delete anything; it is killed right after the answer. The restart finds the pending deletion
    # in remote-deletion-checkpoint and deletes every object of the topic.
    prefix = f"deleted-{uuid.uuid4().hex[:10]}"
    store = ObjectStore(store_config(weed.endpoint, prefix))
    rsm = RemoteStorageManager(store)
    service = service_at(tmp_path, proxy.endpoint, prefix).start()
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1, configs=TIERED))
        for index in range(12):
            service.stub.Produce(pb.ProduceRequest(topic="t", records=make_batch(
                [b"v%05d" % index + b"." * 400], keys=[b"k%d" % index])), timeout=CALL_TIMEOUT_S)
        wait_until(lambda: len(rsm.metadata.list(stored(rsm, "t", 0))) >= 2, "two segments uploaded")
        proxy.mode = "503"
        service.stub.DeleteTopic(pb.DeleteTopicRequest(topic="t"), timeout=CALL_TIMEOUT_S)
        service.process.kill()
        service.process.wait()
    finally:
        service.stop()
    assert list(store.list("t-"))  # the objects outlived the process

    restarted = service_at(tmp_path, weed.endpoint, prefix).start()
    try:
        wait_until(lambda: list(store.list("t-")) == [], "the deleted topic's objects gone")
        restarted.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1, configs=TIERED),
                                   timeout=CALL_TIMEOUT_S)
        answer = restarted.stub.Fetch(pb.FetchRequest(topic="t", offset=0), timeout=CALL_TIMEOUT_S)
        assert records_of(answer) == []  # the new topic of that name starts empty
    finally:
        restarted.stop()


def test_kill_9_during_the_deletion_of_uploaded_segments_loses_nothing_acknowledged(weed, proxy, tmp_path):
    # Both deletions of uploaded segments are cut: local copies renamed .deleted and not unlinked
    # yet (file.delete.delay.ms), and a remote segment below a DeleteRecords start whose
    # DELETE_SEGMENT_STARTED record is written while its objects' DELETE is held by the store.
    prefix = f"deleting-{uuid.uuid4().hex[:10]}"
    rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, prefix)))
    service = service_at(tmp_path, proxy.endpoint, prefix).start()
    partition_dir = service.data_dirs[0] / "t-0"
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1, configs={
            **TIERED, "file.delete.delay.ms": "600000"}), timeout=CALL_TIMEOUT_S)
        for index in range(16):
            service.stub.Produce(pb.ProduceRequest(topic="t", records=make_batch(
                [b"v%05d" % index + b"." * 400], keys=[b"k%d" % index])), timeout=CALL_TIMEOUT_S)
        wait_until(lambda: len(list(partition_dir.glob("*.log"))) == 1 and len(rsm.metadata.list(stored(rsm, "t", 0))) >= 3,
                   "the closed segments uploaded and their local copies deleted")
        assert list(partition_dir.glob("*.log.deleted"))  # renamed, not unlinked yet
        remote = rsm.metadata.list(stored(rsm, "t", 0))
        proxy.stall_request_matching = "?delete"
        cut = remote[1].end_offset + 1  # the first two remote segments lie wholly below it
        service.stub.DeleteRecords(pb.DeleteRecordsRequest(topic="t", partition=0, offset=cut),
                                   timeout=CALL_TIMEOUT_S)
        assert proxy.stalled.wait(60), "the remote pass never reached the objects' DELETE"
        service.process.kill()
        service.process.wait()
    finally:
        service.stop()
    half = [m for m in rsm.metadata.orphans(stored(rsm, "t", 0)) if m.segment_id == remote[0].segment_id]
    assert [m.state for m in half] == [RemoteLogSegmentState.DELETE_SEGMENT_STARTED]
    assert remote[0].segment_id not in {m.segment_id for m in rsm.metadata.list(stored(rsm, "t", 0))}

    restarted = service_at(tmp_path, weed.endpoint, prefix).start()
    try:
        def described_once_listed():
            # The log start is unknown (-1) until the uploader's first pass lists the store.
            answer = restarted.stub.DescribeTopic(pb.DescribeTopicRequest(topic="t"), timeout=CALL_TIMEOUT_S)
            return answer if 0 <= answer.partitions[0].log_start_offset <= cut else None

        wait_until(described_once_listed, "the remote segments listed after the restart")
        described = described_once_listed()
        start = described.partitions[0].log_start_offset
        # Never the half-deleted segment; the DeleteRecords start itself if its checkpoint was
        # written before the kill, else the first remote segment left whole.
        assert remote[0].end_offset < start <= cut and described.partitions[0].log_end_offset == 16
        assert not list(partition_dir.glob("*.deleted"))
        for offset in range(start, 16):  # nothing acknowledged lost, the remote part included
            answer = restarted.stub.Fetch(pb.FetchRequest(topic="t", offset=offset), timeout=CALL_TIMEOUT_S)
            assert b"k%d" % offset in [r.key for r in records_of(answer)], offset
        with pytest.raises(grpc.RpcError) as below:
            restarted.stub.Fetch(pb.FetchRequest(topic="t", offset=remote[0].base_offset), timeout=CALL_TIMEOUT_S)
        assert below.value.code() == grpc.StatusCode.OUT_OF_RANGE
        wait_until(lambda: rsm.metadata.orphans(stored(rsm, "t", 0)) == [], "the half-deleted segment's record removed")
        assert not [key for key in rsm.store.list(partition_prefix(stored(rsm, "t", 0))) if remote[0].segment_id in key]
    finally:
        restarted.stop()
