"""Server-side assignment in KIP-848's shape: the coordinator computes each member's target
partitions from the members' subscriptions and what they own now; members only heartbeat.

Uniform and sticky, as Kafka's ``uniform`` server assignor: with n partitions among m members
subscribed to them, each member gets n // m and n % m of them one more (balanced within one when
subscriptions are the same). A member keeps what it owns up to its share (the larger shares go to
the members that own the most, so fewer partitions move); only the partitions above a share, of
a member gone or no longer subscribed, or new ones, move, each to the least-loaded subscriber.
Pure: no clock, no I/O; ties broken by member id, so the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

__all__ = ["TopicPartition", "assign"]

TopicPartition = tuple[str, int]


def assign(
    subscriptions: Mapping[str, Set[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]] | None = None,
) -> dict[str, frozenset[TopicPartition]]:
    """member id -> its target partitions. ``subscriptions``: member -> topics; topics missing
    from ``partition_counts`` are ignored (not created yet); ``current``: what members own."""
    current = current or {}
    eligible = _subscribers(subscriptions, partition_counts)
    kept = _kept(current, eligible)
    shares = _shares(len(eligible), kept, subscriptions)
    assignment = {member: set(sorted(kept.get(member, ()))[: shares[member]]) for member in subscriptions}
    taken = set().union(*assignment.values()) if assignment else set()
    for partition in sorted(p for p in eligible if p not in taken):
        member = _least_loaded(eligible[partition], assignment, shares)
        assignment[member].add(partition)
    return {member: frozenset(partitions) for member, partitions in assignment.items()}


def _subscribers(subscriptions: Mapping[str, Set[str]],
                 partition_counts: Mapping[str, int]) -> dict[TopicPartition, list[str]]:
    """partition -> the members subscribed to its topic, sorted."""
    eligible: dict[TopicPartition, list[str]] = {}
    for member in sorted(subscriptions):
        for topic in subscriptions[member]:
            for partition in range(partition_counts.get(topic, 0)):
                eligible.setdefault((topic, partition), []).append(member)
    return eligible


def _kept(current: Mapping[str, Set[TopicPartition]],
          eligible: Mapping[TopicPartition, list[str]]) -> dict[str, set[TopicPartition]]:
    """What each member may keep: partitions it owns, still exist and it still subscribes to,
    each claimed once (a partition two members claim stays with the first by id)."""
    kept: dict[str, set[TopicPartition]] = {}
    claimed: set[TopicPartition] = set()
    for member in sorted(current):
        for partition in sorted(current[member]):
            if partition not in claimed and member in eligible.get(partition, ()):
                kept.setdefault(member, set()).add(partition)
                claimed.add(partition)
    return kept


def _shares(partition_count: int, kept: Mapping[str, set[TopicPartition]],
            subscriptions: Mapping[str, Set[str]]) -> dict[str, int]:
    """Each member's share: n // m, plus one for the n % m members that own the most."""
    members = sorted(subscriptions, key=lambda m: (-len(kept.get(m, ())), m))
    if not members:
        return {}
    quota, extra = divmod(partition_count, len(members))
    return {member: quota + (1 if rank < extra else 0) for rank, member in enumerate(members)}


def _least_loaded(candidates: list[str], assignment: Mapping[str, set[TopicPartition]],
                  shares: Mapping[str, int]) -> str:
    """The candidate furthest below its share (with different subscriptions a share may not be
    reachable; then the one with the fewest partitions)."""
    return min(candidates, key=lambda m: (len(assignment[m]) >= shares[m], len(assignment[m]) - shares[m], m))
