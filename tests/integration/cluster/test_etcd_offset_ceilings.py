"""Offset ceilings against a real etcd (cluster/offset_ceilings.py): the owner raises its ceiling
ahead of its log, an unclean takeover starts at the old epoch's ceiling, and the old owner can
raise it no more once the takeover committed; a takeover racing a raise fails cleanly."""

from __future__ import annotations

import json
import time

import pytest

from seglog_server.cluster import ClusterKeys, EtcdGateway, MetadataCache, OwnershipConflictError, create_topic, read_owner
from seglog_server.cluster.errors import MalformedRecordError
from seglog_server.cluster.etcd_gateway import b64
from seglog_server.cluster.offset_ceilings import OffsetCeilings, read_ceiling, takeover_start
from seglog_server.cluster.ownership import PartitionOwner
from seglog_server.cluster.partition_moves import read_owner_record, take_over

pytestmark = pytest.mark.integration
BLOCK = 100


class _Cache:
    """The cache's answers the ceilings read, straight from etcd."""

    def __init__(self, gateway: EtcdGateway, keys: ClusterKeys) -> None:
        self.gateway, self.keys = gateway, keys

    def topics(self) -> dict[str, int]:
        return {"t": 1}

    def owner_of(self, topic: str, partition: int) -> PartitionOwner:
        return read_owner_record(self.gateway, self.keys, topic, partition)[0]

    def owners(self) -> dict[tuple[str, int], PartitionOwner]:
        return {(topic, partition): self.owner_of(topic, partition)
                for topic, count in self.topics().items() for partition in range(count)}


@pytest.fixture
def world(etcd, request):
    keys = ClusterKeys(f"ceil-{request.node.name[:30]}")
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    lease = gateway.grant(30)
    for instance in ("a", "b"):
        gateway.txn([], [{"request_put": {"key": b64(keys.instance(instance)), "value": b64(json.dumps({
            "id": instance, "address": f"{instance}:1"})), "lease": lease if instance == "b" else 0}}])
    create_topic(gateway, keys, "t", ["a"])
    yield gateway, keys
    gateway.revoke(lease)
    gateway.close()


def test_the_owner_raises_its_ceiling_ahead_of_its_log_and_a_takeover_starts_above_it(world):
    gateway, keys = world
    ends = {("t", 0): 0}
    ceilings = OffsetCeilings(lambda: gateway, keys, "a", _Cache(gateway, keys), lambda t, p: ends.get((t, p)),
                              block=BLOCK)
    owner = read_owner(gateway, keys, "t", 0)
    assert ceilings.ceiling("t", 0, owner) == BLOCK and ceilings.step() == 0  # a new epoch: one block, no write
    ends[("t", 0)] = 60  # within half a block of the ceiling
    assert ceilings.beyond("t", 0, owner) is None
    assert ceilings.step() == 1 and ceilings.ceiling("t", 0, owner) == 160
    assert read_ceiling(gateway, keys, "t", 0, owner, BLOCK)[0] == 160
    ends[("t", 0)] = 170  # produce outran the thread: not acknowledged past the ceiling
    assert ceilings.beyond("t", 0, owner) == (170, 160)

    # The owner's lease gone (its instance key deleted), b takes over at the ceiling etcd holds.
    gateway.delete(keys.instance("a"))
    start, revision = takeover_start(gateway, keys, "t", 0, owner, BLOCK)
    assert start == 160
    new_owner = take_over(gateway, keys, "t", 0, "b", owner, start, revision)
    assert (new_owner.owner, new_owner.epoch, new_owner.start_offset) == ("b", 1, 160)
    assert read_owner(gateway, keys, "t", 0).start_offset == 160
    # The old owner, resumed, raises its ceiling no more: compared on an owner record that moved on.
    assert ceilings.step() == 0
    assert ceilings.ceiling("t", 0, owner) == 160
    # The new owner's first block counts from where its epoch started.
    assert read_ceiling(gateway, keys, "t", 0, read_owner(gateway, keys, "t", 0), BLOCK)[0] == 260


def test_a_takeover_racing_a_raise_of_the_ceiling_fails_and_the_next_read_sees_it(world):
    gateway, keys = world
    ceilings = OffsetCeilings(lambda: gateway, keys, "a", _Cache(gateway, keys), lambda t, p: 90, block=BLOCK)
    owner = read_owner(gateway, keys, "t", 0)
    gateway.delete(keys.instance("a"))
    start, revision = takeover_start(gateway, keys, "t", 0, owner, BLOCK)
    assert start == BLOCK
    assert ceilings.step() == 1  # raised to 190 after the takeover read 100
    with pytest.raises(OwnershipConflictError, match="offset ceiling changed"):
        take_over(gateway, keys, "t", 0, "b", owner, start, revision)
    start, revision = takeover_start(gateway, keys, "t", 0, owner, BLOCK)
    assert start == 190
    assert take_over(gateway, keys, "t", 0, "b", owner, start, revision).start_offset == 190


def test_a_malformed_ceiling_record_is_refused_by_name_and_the_thread_goes_on(world, caplog):
    gateway, keys = world
    key = keys.offset_ceiling("t", 0)
    gateway.txn([], [{"request_put": {"key": b64(key), "value": b64(b'{"epoch": 0, "ceiling": 1e400}')}}])
    owner = read_owner(gateway, keys, "t", 0)
    for read in (lambda: read_ceiling(gateway, keys, "t", 0, owner, BLOCK),
                 lambda: takeover_start(gateway, keys, "t", 0, owner)):
        with pytest.raises(MalformedRecordError) as raised:
            read()
        assert raised.value.key == key
    ends = {("t", 0): 60}  # within half a block: every pass reads the record
    ceilings = OffsetCeilings(lambda: gateway, keys, "a", _Cache(gateway, keys), lambda t, p: ends.get((t, p)),
                              block=BLOCK, interval_s=0.01)
    ceilings.start()
    try:
        gateway.txn([], [{"request_put": {"key": b64(key), "value": b64(b"[")}}])  # another malformed revision
        wait_s = 0.0
        while ceilings.raise_count == 0 and wait_s < 10:  # the passes go on: a good record is raised
            if wait_s >= 0.5:
                gateway.txn([], [{"request_put": {"key": b64(key), "value": b64(b'{"ceiling": 100, "epoch": 0}')}}])
            time.sleep(0.05)
            wait_s += 0.05
    finally:
        ceilings.stop()
    assert ceilings.raise_count == 1 and read_ceiling(gateway, keys, "t", 0, owner, BLOCK)[0] == 160
    logged = [r for r in caplog.records if "offset ceiling of t-0 not raised" in r.getMessage()]
    assert 1 <= len(logged) <= 2, [r.getMessage() for r in logged]  # once per malformed record, not per pass


def test_one_bad_ceiling_record_stops_its_own_partition_only(world, caplog):
    """One partition's malformed ceiling record once ended every pass of the owner's thread at that
    partition, so the partitions after it in the pass were never raised again: their produces
    stopped a block later. The bad one first in the pass, the others are raised in the same pass."""
    gateway, keys = world
    create_topic(gateway, keys, "m", ["a", "a", "a"])
    bad = keys.offset_ceiling("m", 0)
    gateway.txn([], [{"request_put": {"key": b64(bad), "value": b64(b'{"epoch": 0, "ceiling": -1}')}}])

    class Cache(_Cache):
        def topics(self) -> dict[str, int]:
            return {"m": 3, "t": 1}  # m-0 first

    ceilings = OffsetCeilings(lambda: gateway, keys, "a", Cache(gateway, keys), lambda t, p: 60, block=BLOCK)
    assert ceilings.step() == 3  # m-1, m-2, t-0
    assert ceilings.step() == 0  # all raised past 60 + a half block; m-0 logged once only
    for topic, partition in (("m", 1), ("m", 2), ("t", 0)):
        owner = read_owner(gateway, keys, topic, partition)
        assert read_ceiling(gateway, keys, topic, partition, owner, BLOCK)[0] == 160
    logged = [r.getMessage() for r in caplog.records if "offset ceiling of m-0 not raised" in r.getMessage()]
    assert len(logged) == 1 and bad in logged[0] and "never delete it" in logged[0]
    gateway.txn([], [{"request_put": {"key": b64(bad), "value": b64(b'{"ceiling": 100, "epoch": 0}')}}])
    assert ceilings.step() == 1  # written again: raised at the next pass
    assert read_ceiling(gateway, keys, "m", 0, read_owner(gateway, keys, "m", 0), BLOCK)[0] == 160


def test_a_partition_whose_topic_record_is_malformed_is_still_raised_by_its_owner(world):
    """A topic whose record does not decode is missing from the cache's topics (at a restart, with
    no good record seen), while its owner, whose owner record is good, serves it: its ceiling must
    still be raised, or its produces stop a block later. The real cache, over a real etcd."""
    gateway, keys = world
    gateway.txn([], [{"request_put": {"key": b64(keys.topic("t")), "value": b64(b'{"partitions": "1"}')}}])
    cache = MetadataCache(EtcdGateway(gateway.endpoints, timeout_s=5), keys)
    cache.start()
    try:
        assert cache.wait_until(lambda c: c.statistics().connected and c.owner_of("t", 0) is not None, 10)
        assert "t" not in cache.topics()
        ceilings = OffsetCeilings(lambda: gateway, keys, "a", cache, lambda t, p: 60, block=BLOCK)
        assert ceilings.step() == 1
    finally:
        cache.stop()
    assert read_ceiling(gateway, keys, "t", 0, read_owner(gateway, keys, "t", 0), BLOCK)[0] == 160
