"""Fixtures for the remote tier: one real S3-compatible server (weed) on loopback for the session's
modules, a bucket, and per test its own key prefix and its own closed-segment files."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import pytest
from tests.support.s3_server import CREDENTIALS_ENV, FaultProxy, WeedServer

from seglog_server.storage.base.topic_partition import TopicIdPartition
from seglog_server.storage.remote import LogSegmentData, ObjectStore, ObjectStoreConfig

BUCKET = "seglog-remote-test"
# The topic id the store-level tests key "events" by (a LogManager's topics have their own).
TOPIC_ID = "0123456789abcdef0123456789abcdef"
EVENTS_0 = TopicIdPartition("events", 0, TOPIC_ID)
EVENTS_1 = TopicIdPartition("events", 1, TOPIC_ID)


def stored(rsm, topic: str, partition: int = 0) -> TopicIdPartition:
    """The partition of ``topic`` as the store keys it, its topic id read from the keys under the
    test's prefix (one generation of each name in these tests; none stored yet: an id no object has)."""
    ids = {key.split("/", 1)[0][len(topic) + 1:] for key in rsm.store.list(f"{topic}-")}
    ids = {i for i in ids if TopicIdPartition.is_topic_id(i)}
    assert len(ids) <= 1, f"several generations of {topic!r} in the store: {sorted(ids)}"
    return TopicIdPartition(topic, partition, ids.pop() if ids else "0" * 32)


def remote_tp(manager, topic: str, partition: int = 0) -> TopicIdPartition:
    """The partition of a LogManager's tiered topic, as its objects are keyed (with its topic id)."""
    return manager.get_log(topic, partition).remote_tier.topic_id_partition


@pytest.fixture(scope="module")
def weed(s3_store):
    """The session's weed (s3_store, tests/integration/conftest.py) with the bucket, its credentials
    in the environment for the module's tests: boto3 here and the processes they start read them."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS_ENV.items():
            patch.setenv(name, value)
        ObjectStore(ObjectStoreConfig(bucket=BUCKET, endpoint_url=s3_store.endpoint)).create_bucket()
        yield s3_store


@pytest.fixture(scope="module")
def private_weed(tmp_path_factory):
    """A weed of the module's own, for modules that freeze their store (SIGSTOP) or check which
    keys it refuses: what a freeze leaves behind in weed is then no other module's concern, and a
    refusal is checked against a weed no other module has used (on the shared one, an unknown key
    pair was once accepted). Such a module overrides ``weed`` with it."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS_ENV.items():
            patch.setenv(name, value)
        server = WeedServer.start(str(tmp_path_factory.mktemp("weed")))
        try:
            ObjectStore(ObjectStoreConfig(bucket=BUCKET, endpoint_url=server.endpoint)).create_bucket()
            yield server
        finally:
            server.stop()


def store_config(endpoint: str, prefix: str, **limits) -> ObjectStoreConfig:
    return ObjectStoreConfig(bucket=BUCKET, prefix=prefix, endpoint_url=endpoint, **limits)


@pytest.fixture
def prefix():
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(weed, prefix):
    return ObjectStore(store_config(weed.endpoint, prefix))


@pytest.fixture
def proxy(weed):
    fault_proxy = FaultProxy(weed.s3_port)
    yield fault_proxy
    fault_proxy.close()


@dataclass(frozen=True)
class SegmentOnDisk:
    data: LogSegmentData
    contents: dict[str, bytes]


@pytest.fixture
def make_segment(tmp_path):
    """make_segment(base_offset, log_bytes) -> a closed segment's files on disk (the remote tier
    treats them as opaque bytes: their format is the segment layer's concern)."""
    def make(base_offset: int = 100, log_bytes: int = 200_000, topic: str = "events",
             partition: int = 0) -> SegmentOnDisk:
        directory = tmp_path / f"{topic}-{partition}-{base_offset}-{uuid.uuid4().hex[:6]}"
        directory.mkdir()
        contents = {".log": os.urandom(log_bytes), ".index": os.urandom(8 * 64),
                    ".timeindex": os.urandom(12 * 64), ".snapshot": os.urandom(97)}
        paths = {}
        for kind, data in contents.items():
            paths[kind] = str(directory / f"{base_offset:020d}{kind}")
            with open(paths[kind], "wb") as f:
                f.write(data)
        epochs = b"0\n1\n3 100\n"
        contents[".leader-epoch-checkpoint"] = epochs
        data = LogSegmentData(
            topic=topic, partition=partition, base_offset=base_offset,
            end_offset=base_offset + 99, max_timestamp_ms=1_700_000_000_000,
            log_path=paths[".log"], offset_index_path=paths[".index"],
            time_index_path=paths[".timeindex"], producer_snapshot_path=paths[".snapshot"],
            leader_epoch_bytes=epochs, leader_epochs=((3, base_offset),))
        return SegmentOnDisk(data, contents)
    return make
