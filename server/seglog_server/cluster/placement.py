"""Placement: which live instance owns each partition of a new topic. Pure and deterministic.

Each partition in turn goes to the live instance with the fewest partitions, then the fewest bytes,
then the smallest instance id (so every instance computing it gets the same answer). A placed
partition counts at once toward its instance, so one topic's partitions spread round the instances;
bytes are not added (a new partition is empty). Dead instances never receive a partition: giving
one a partition would make it offline from its first moment.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable

from .errors import NoLiveInstanceError


@dataclass(frozen=True)
class InstanceLoad:
    instance_id: str
    alive: bool
    partition_count: int
    bytes: int


def place_partitions(partition_count: int, instances: Iterable[InstanceLoad]) -> tuple[str, ...]:
    """The owner of partitions 0..partition_count-1, in order."""
    assert partition_count >= 0, partition_count
    heap = [(load.partition_count, load.bytes, load.instance_id) for load in instances if load.alive]
    if not heap and partition_count:
        raise NoLiveInstanceError(f"no live instance to place {partition_count} partitions on")
    heapq.heapify(heap)
    owners = []
    for _ in range(partition_count):
        count, size, instance_id = heapq.heappop(heap)
        owners.append(instance_id)
        heapq.heappush(heap, (count + 1, size, instance_id))
    return tuple(owners)
