"""ClusterRouting.check_produce decides ownership and the epoch a produce is admitted under from one
owner record, whatever the watched cache changes between its reads: admitted means the record
read names this instance, and the epoch returned is that record's (never the previous owner's).
The cache is an in-memory stand-in whose owner record changes on every read (a watch event
applied between two reads of the request path)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog_server.cluster.metadata_cache import CacheStatistics, InstanceInfo
from seglog_server.cluster.ownership import PartitionOwner as OwnerRecord
from seglog_server.rpc.cluster_routing import ClusterRouting, NotPartitionOwnerError

HERE, THERE = "b", "a"


class ChangingCache:
    """Each owner_of read returns the next record of ``records`` (the last one once they run out)."""

    def __init__(self, records: list[OwnerRecord]) -> None:
        self.records = list(records)
        self.read: list[OwnerRecord] = []

    def owner_of(self, topic: str, partition: int) -> OwnerRecord:
        record = self.records.pop(0) if len(self.records) > 1 else self.records[0]
        self.read.append(record)
        return record

    def move_of(self, topic: str, partition: int) -> None:
        return None

    def instances(self) -> dict[str, InstanceInfo]:
        return {name: InstanceInfo(name, f"{name}:1", True, None) for name in (HERE, THERE)}

    def statistics(self) -> CacheStatistics:
        return CacheStatistics(True, 1, 1, 0)


class Membership:
    def may_acknowledge(self) -> bool:
        return True

    def registration_revision(self) -> int:
        return 1


def routing_over(cache: ChangingCache) -> ClusterRouting:
    return ClusterRouting("c", HERE, f"{HERE}:1", Membership(), cache, 5.0)


def test_a_partition_taken_over_between_two_reads_is_not_admitted_under_the_previous_owners_epoch():
    # The previous owner's record, then this instance's (the takeover's watch event in between).
    cache = ChangingCache([OwnerRecord(THERE, 4, 0), OwnerRecord(HERE, 5, 0)])
    routing = routing_over(cache)
    with pytest.raises(NotPartitionOwnerError) as refused:
        routing.check_produce("t", 0)
    assert (refused.value.owner_id, refused.value.epoch) == (THERE, 4)  # the one record read
    assert routing.check_produce("t", 0) == 5  # the next produce sees the takeover


@given(st.lists(st.tuples(st.sampled_from([HERE, THERE]), st.integers(0, 20)), min_size=1, max_size=4))
def test_an_admitted_produce_carries_the_epoch_of_a_record_naming_this_instance(changes):
    cache = ChangingCache([OwnerRecord(owner, epoch, 0) for owner, epoch in changes])
    try:
        epoch = routing_over(cache).check_produce("t", 0)
    except NotPartitionOwnerError as refused:
        assert (refused.owner_id, refused.epoch) in {(r.owner, r.epoch) for r in cache.read if r.owner != HERE}
        return
    # Admitted: by a record naming this instance, and under that same record's epoch.
    assert (HERE, epoch) in {(r.owner, r.epoch) for r in cache.read}
    assert len(cache.read) == 1 or len({(r.owner, r.epoch) for r in cache.read}) == 1
