"""The revocation protocol of KIP-848 as a pure state machine: members heartbeat, the coordinator
answers with what each may own, and a partition moves only after its previous owner acknowledged
giving it up, so no partition is ever owned by two members at once.

The coordinator's ``owned[m]`` is what it handed member m and m has not yet reported released.
A heartbeat reports the member's owned partitions; any that the coordinator handed it and it no
longer reports are acknowledged revoked. The answer is the member's target partitions it owns
already, plus those of its target that nobody else owns now; the rest of its target follows once
their owners let go. What it owns outside its target is left out of the answer: the member stops
on them and reports without them (the revocation), then they go to their new owner.

Member epochs fence zombies: every answer carries the member's epoch, which moves to the group's
epoch once the member owns no partition outside its target; a heartbeat or a commit carrying
another epoch is refused (FencedMemberError), as is one from a member removed after its session
timeout or its leave (UnknownMemberError). Epoch 0 joins, -1 leaves, as in KIP-848.

A lost answer does not fence a healthy member (KIP-848): a heartbeat carrying the member's
previous epoch is accepted when the partitions it reports owning are a subset of what it owned at
that epoch (what it reported in the heartbeat whose answer moved its epoch): the member never saw
the new epoch and retries with the old one. Commits stay on the current epoch only.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from .assignor import TopicPartition, assign
from .errors import FencedMemberError, UnknownMemberError

__all__ = ["JOIN_EPOCH", "LEAVE_EPOCH", "GroupReconciliation", "HeartbeatAnswer"]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    assignment: frozenset[TopicPartition]  # what the member may own until its next heartbeat


@dataclass
class _Member:
    subscription: frozenset[str]
    epoch: int
    session_deadline_ms: int
    owned: set[TopicPartition] = field(default_factory=set)
    # The epoch before the last move and what the member owned at it (a lost answer's retry).
    previous_epoch: int | None = None
    previous_owned: frozenset[TopicPartition] = frozenset()


class GroupReconciliation:
    def __init__(self, group: str, partition_counts: Mapping[str, int], *, session_timeout_ms: int = 45_000) -> None:
        assert session_timeout_ms > 0
        self.group = group
        self._partition_counts = dict(partition_counts)
        self._session_timeout_ms = session_timeout_ms  # Kafka's group.consumer.session.timeout.ms
        self._members: dict[str, _Member] = {}
        self._target: dict[str, frozenset[TopicPartition]] = {}
        self.group_epoch = 0

    # -- heartbeats ----------------------------------------------------------------------------
    def heartbeat(self, member_id: str, member_epoch: int, now_ms: int, *,
                  subscription: Set[str] | None = None,
                  owned: Set[TopicPartition] = frozenset()) -> HeartbeatAnswer:
        """Joins (epoch 0, with a subscription), keeps or leaves (epoch -1) ``member_id``."""
        if member_epoch == LEAVE_EPOCH:
            self._remove(member_id)
            return HeartbeatAnswer(member_id, LEAVE_EPOCH, frozenset())
        if member_epoch == JOIN_EPOCH:  # a known member joining again restarted: it owns nothing
            self._members.pop(member_id, None)
            self._join(member_id, frozenset(subscription or ()), now_ms)
        member = self._check(member_id, member_epoch, owned)
        member.session_deadline_ms = now_ms + self._session_timeout_ms
        if subscription is not None and frozenset(subscription) != member.subscription:
            member.subscription = frozenset(subscription)
            self._retarget()
        member.owned &= set(owned)  # what it no longer reports is acknowledged revoked
        return self._answer(member_id, member, frozenset(owned))

    def check_commit(self, member_id: str, member_epoch: int) -> None:
        """Refuses a commit from a fenced or unknown member (raises)."""
        self._check(member_id, member_epoch)

    def expire_sessions(self, now_ms: int) -> list[str]:
        """Removes the members whose session timed out; returns their ids."""
        gone = sorted(m for m, member in self._members.items() if now_ms >= member.session_deadline_ms)
        for member_id in gone:
            self._remove(member_id)
        return gone

    def set_partition_counts(self, partition_counts: Mapping[str, int]) -> None:
        """Topics created, deleted or grown since the last call: the targets follow."""
        counts = dict(partition_counts)
        if counts != self._partition_counts:
            self._partition_counts = counts
            self._retarget()

    # -- reads ---------------------------------------------------------------------------------
    def members(self) -> list[str]:
        return sorted(self._members)

    def subscriptions(self) -> dict[str, frozenset[str]]:
        return {member_id: member.subscription for member_id, member in self._members.items()}

    def owners(self) -> dict[str, frozenset[TopicPartition]]:
        """member -> what the coordinator holds it owns (pairwise disjoint, always)."""
        return {member_id: frozenset(member.owned) for member_id, member in self._members.items()}

    def target(self) -> dict[str, frozenset[TopicPartition]]:
        return dict(self._target)

    def member_epoch(self, member_id: str) -> int:
        return self._members[member_id].epoch

    # -- the machine ---------------------------------------------------------------------------
    def _check(self, member_id: str, member_epoch: int, owned: Set[TopicPartition] | None = None) -> _Member:
        """The member, when ``member_epoch`` is its epoch; a heartbeat (``owned`` given) may also
        carry its previous epoch with what it owned at it or less (the answer was lost)."""
        member = self._members.get(member_id)
        if member is None:
            raise UnknownMemberError(f"member {member_id!r} is not in group {self.group!r}")
        lost_answer = (owned is not None and member_epoch == member.previous_epoch
                       and set(owned) <= member.previous_owned)
        if member_epoch != member.epoch and not lost_answer:
            raise FencedMemberError(
                f"member {member_id!r} of group {self.group!r} sent epoch {member_epoch}, its epoch is {member.epoch}"
            )
        return member

    def _join(self, member_id: str, subscription: frozenset[str], now_ms: int) -> None:
        self._members[member_id] = _Member(subscription, JOIN_EPOCH, now_ms + self._session_timeout_ms)
        self._retarget()

    def _remove(self, member_id: str) -> None:
        if self._members.pop(member_id, None) is not None:
            self._retarget()

    def _retarget(self) -> None:
        self.group_epoch += 1
        self._target = assign(
            {m: member.subscription for m, member in self._members.items()},
            self._partition_counts,
            {m: member.owned for m, member in self._members.items()},
        )

    def _answer(self, member_id: str, member: _Member, reported: frozenset[TopicPartition]) -> HeartbeatAnswer:
        target = self._target.get(member_id, frozenset())
        owned_by_others = set().union(*(m.owned for other, m in self._members.items() if other != member_id))
        granted = {p for p in target if p not in owned_by_others}
        member.owned |= granted
        assert not member.owned & owned_by_others, (member_id, member.owned & owned_by_others)
        if member.owned <= target and member.epoch != self.group_epoch:
            # Nothing left to revoke: the member reached the target. Should this answer be lost,
            # its retry at the old epoch reporting at most ``reported`` is still this member.
            member.previous_epoch, member.previous_owned = member.epoch, reported
            member.epoch = self.group_epoch
        return HeartbeatAnswer(member_id, member.epoch, frozenset(member.owned & target))
