"""place_partitions: fewest partitions, then fewest bytes, ties by id; deterministic; live only."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog_server.cluster import InstanceLoad, NoLiveInstanceError, place_partitions

loads = st.lists(st.builds(InstanceLoad, instance_id=st.text("abcdef0123", min_size=1, max_size=4),
                           alive=st.booleans(), partition_count=st.integers(0, 20), bytes=st.integers(0, 10**12)),
                 min_size=1, max_size=8, unique_by=lambda load: load.instance_id)


@given(instances=loads, partition_count=st.integers(0, 50), seed=st.integers())
def test_placement_is_deterministic_whatever_the_order_instances_are_listed_in(instances, partition_count, seed):
    if not any(load.alive for load in instances):
        return
    shuffled = list(instances)
    random.Random(seed).shuffle(shuffled)
    assert place_partitions(partition_count, instances) == place_partitions(partition_count, shuffled)


@given(instances=loads, partition_count=st.integers(1, 50))
def test_only_live_instances_receive_partitions(instances, partition_count):
    live = {load.instance_id for load in instances if load.alive}
    if not live:
        with pytest.raises(NoLiveInstanceError):
            place_partitions(partition_count, instances)
        return
    owners = place_partitions(partition_count, instances)
    assert len(owners) == partition_count and set(owners) <= live


@given(instances=loads, partition_count=st.integers(1, 50))
def test_every_instance_given_a_partition_ends_within_one_of_the_least_loaded(instances, partition_count):
    live = [load for load in instances if load.alive]
    if not live:
        return
    owners = place_partitions(partition_count, instances)
    final = {load.instance_id: load.partition_count + owners.count(load.instance_id) for load in live}
    assert all(final[owner] <= min(final.values()) + 1 for owner in set(owners))


@given(instance_count=st.integers(1, 8), partition_count=st.integers(0, 60))
def test_a_topic_on_equal_instances_is_balanced_within_one_partition(instance_count, partition_count):
    instances = [InstanceLoad(f"i{n}", True, 3, 100) for n in range(instance_count)]
    owners = place_partitions(partition_count, instances)
    counts = [owners.count(load.instance_id) for load in instances]
    assert max(counts) - min(counts) <= 1


def test_ties_go_to_fewer_bytes_then_the_smaller_id():
    instances = [InstanceLoad("b", True, 1, 10), InstanceLoad("a", True, 1, 10), InstanceLoad("c", True, 1, 5),
                 InstanceLoad("d", False, 0, 0)]
    assert place_partitions(4, instances) == ("c", "a", "b", "c")


def test_no_partitions_need_no_instance():
    assert place_partitions(0, []) == ()
