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
previous epoch is accepted when the partitions it reports owning are a subset of what the
coordinator holds it owns (Kafka's rule): the member never saw the new epoch and retries with the
old one. Commits stay on the current epoch only. Two answers lost while the member's epoch moved
twice leave it two epochs behind, which is fenced, as in Kafka (its retry at the previous epoch
was accepted and moved it again): the member gives its partitions up and rejoins at epoch 0.

Static membership (KIP-848's group.instance.id): a member joining with an instance id holds it
alone; a second join with the same instance id while its holder is live is refused
(UnreleasedInstanceIdError), a heartbeat from a member id no longer holding the instance id too
(FencedInstanceIdError). Epoch -2 leaves but keeps the member and what it owns for its session
timeout; a join with the same instance id (any member id) within it takes the member over, its
partitions and epoch included, with no rebalance (unless its subscription differs). Once the
session runs out the member is removed and its partitions move.

Rebalance timeout (Kafka's rebalance.timeout.ms, the client's max.poll.interval.ms): a member
told to revoke partitions that still owns any of them ``rebalance_timeout_ms`` after the first
answer telling it is removed (``expire_sessions``), so the partitions can move.

``snapshot`` is everything the group is, bar the deadlines (which restart at ``restore``: a
member restored after a coordinator restart has a whole session timeout to come back).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from .assignor import TopicPartition, assign
from .errors import FencedInstanceIdError, FencedMemberError, UnknownMemberError, UnreleasedInstanceIdError

__all__ = [
    "JOIN_EPOCH", "LEAVE_EPOCH", "LEAVE_STATIC_EPOCH", "NO_EPOCH", "REBALANCE_TIMEOUT_MS", "GroupReconciliation",
    "GroupSnapshot", "HeartbeatAnswer", "MemberSnapshot",
]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2  # KIP-848: a static member leaving for a while (a restart); keeps its partitions
NO_EPOCH = -1  # a previous epoch never set
# Kafka consumer's max.poll.interval.ms default, its rebalance timeout when the member names none.
REBALANCE_TIMEOUT_MS = 300_000


@dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    assignment: frozenset[TopicPartition]  # what the member may own until its next heartbeat
    # Where the coordinator wrote the change of membership (offsets_log.Appended), for the answer
    # to wait until it is durable; None: nothing changed, nothing written.
    written: object = None


@dataclass(frozen=True)
class MemberSnapshot:
    subscription: frozenset[str]
    epoch: int  # LEAVE_STATIC_EPOCH: a static member away, ``previous_epoch`` its epoch
    previous_epoch: int
    owned: frozenset[TopicPartition]
    instance_id: str | None = None
    rebalance_timeout_ms: int = REBALANCE_TIMEOUT_MS
    client_id: str = ""  # Kafka's client.id, from its heartbeats
    client_host: str = ""  # where the service saw its heartbeats from


@dataclass(frozen=True)
class GroupSnapshot:
    group_epoch: int
    partition_counts: dict[str, int]
    members: dict[str, MemberSnapshot]
    target: dict[str, frozenset[TopicPartition]]


@dataclass
class _Member:
    subscription: frozenset[str]
    epoch: int
    session_deadline_ms: int
    owned: set[TopicPartition] = field(default_factory=set)
    previous_epoch: int = NO_EPOCH  # the epoch before the last move (a lost answer's retry)
    instance_id: str | None = None
    rebalance_timeout_ms: int = REBALANCE_TIMEOUT_MS
    revocation_deadline_ms: int | None = None  # set while it owns partitions outside its target
    client_id: str = ""
    client_host: str = ""

    def snapshot(self) -> MemberSnapshot:
        return MemberSnapshot(self.subscription, self.epoch, self.previous_epoch, frozenset(self.owned),
                              self.instance_id, self.rebalance_timeout_ms, self.client_id, self.client_host)


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
                  owned: Set[TopicPartition] = frozenset(), instance_id: str | None = None,
                  rebalance_timeout_ms: int | None = None, client_id: str | None = None,
                  client_host: str | None = None) -> HeartbeatAnswer:
        """Joins (epoch 0, with a subscription), keeps or leaves (epoch -1; -2 for a static
        member away for a while) ``member_id``. ``client_id`` and ``client_host`` (None: as they
        were) are the member's client.id and the address its heartbeat came from, as Kafka keeps
        them in the member's metadata."""
        if instance_id is not None and member_epoch != JOIN_EPOCH:
            self._check_instance(member_id, instance_id)
        if member_epoch == LEAVE_EPOCH or (member_epoch == LEAVE_STATIC_EPOCH and instance_id is None):
            self._remove(member_id)
            return HeartbeatAnswer(member_id, LEAVE_EPOCH, frozenset())
        if member_epoch == LEAVE_STATIC_EPOCH:
            return self._leave_static(member_id, now_ms)
        if member_epoch == JOIN_EPOCH:  # a new member owns nothing; one taking over owns its partitions
            self._join_member(member_id, instance_id, frozenset(subscription or ()), now_ms, rebalance_timeout_ms)
            member = self._members[member_id]
        else:
            member = self._check(member_id, member_epoch, owned)
            member.owned &= set(owned)  # what it no longer reports is acknowledged revoked
        member.session_deadline_ms = now_ms + self._session_timeout_ms
        if rebalance_timeout_ms is not None:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if client_id is not None:
            member.client_id = client_id
        if client_host is not None:
            member.client_host = client_host
        if subscription is not None and frozenset(subscription) != member.subscription:
            member.subscription = frozenset(subscription)
            self._retarget()
        return self._answer(member_id, member, now_ms)

    def check_commit(self, member_id: str, member_epoch: int) -> None:
        """Refuses a commit from a fenced or unknown member (raises)."""
        self._check(member_id, member_epoch)

    def expire_sessions(self, now_ms: int) -> list[str]:
        """Removes the members whose session timed out, or that still own partitions they were
        told to revoke a rebalance timeout ago; returns their ids."""
        gone = self.expiring(now_ms)
        for member_id in gone:
            self._remove(member_id)
        return gone

    def expiring(self, now_ms: int) -> list[str]:
        """The members ``expire_sessions(now_ms)`` would remove; changes nothing."""
        return sorted(m for m, member in self._members.items() if now_ms >= member.session_deadline_ms
                      or (member.revocation_deadline_ms is not None and now_ms >= member.revocation_deadline_ms))

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

    def clients(self) -> dict[str, tuple[str, str]]:
        """member -> (client id, client host)."""
        return {m: (member.client_id, member.client_host) for m, member in self._members.items()}

    def instance_ids(self) -> dict[str, str]:
        """member -> its instance id, for the static members."""
        return {m: member.instance_id for m, member in self._members.items() if member.instance_id is not None}

    def snapshot(self) -> GroupSnapshot:
        return GroupSnapshot(self.group_epoch, dict(self._partition_counts),
                             {m: member.snapshot() for m, member in sorted(self._members.items())},
                             {m: t for m, t in sorted(self._target.items())})

    def member_snapshot(self, member_id: str) -> tuple[MemberSnapshot, frozenset[TopicPartition]] | None:
        """One member as ``snapshot`` holds it, with its target (None: not a member)."""
        member = self._members.get(member_id)
        if member is None:
            return None
        return member.snapshot(), self._target.get(member_id, frozenset())

    def copy(self) -> GroupReconciliation:
        """An independent copy, deadlines included (what a failed write puts back): the members'
        mutable parts copied, their frozen ones shared."""
        copied = GroupReconciliation.__new__(GroupReconciliation)
        copied.group, copied.group_epoch = self.group, self.group_epoch
        copied._session_timeout_ms = self._session_timeout_ms
        copied._partition_counts = dict(self._partition_counts)
        copied._target = dict(self._target)
        copied._members = {m: dataclasses.replace(member, owned=set(member.owned))
                           for m, member in self._members.items()}
        return copied

    def member_local(self, member_id: str, member_epoch: int, subscription: Set[str] | None,
                     partition_counts: Mapping[str, int]) -> bool:
        """Whether ``heartbeat`` with these arguments changes at most ``member_id`` (no join, no
        leave, the same subscription and topics): what a failed write puts back is then that member
        alone (``copy_member``), not the whole group."""
        member = self._members.get(member_id)
        return (member is not None and member_epoch not in (JOIN_EPOCH, LEAVE_EPOCH, LEAVE_STATIC_EPOCH)
                and (subscription is None or frozenset(subscription) == member.subscription)
                and dict(partition_counts) == self._partition_counts)

    def copy_member(self, member_id: str) -> _Member:
        """An independent copy of one member, deadlines included."""
        member = self._members[member_id]
        return dataclasses.replace(member, owned=set(member.owned))

    def put_member(self, member_id: str, member: _Member) -> None:
        """Puts back a member as ``copy_member`` took it."""
        self._members[member_id] = dataclasses.replace(member, owned=set(member.owned))

    @classmethod
    def restore(cls, group: str, snapshot: GroupSnapshot, now_ms: int, *,
                session_timeout_ms: int = 45_000) -> GroupReconciliation:
        """The group as ``snapshot`` holds it; every member's session (and a revoking member's
        rebalance timeout) counted from ``now_ms``."""
        restored = cls(group, snapshot.partition_counts, session_timeout_ms=session_timeout_ms)
        restored.group_epoch = snapshot.group_epoch
        restored._target = dict(snapshot.target)
        for member_id, m in snapshot.members.items():
            member = _Member(m.subscription, m.epoch, now_ms + session_timeout_ms, set(m.owned), m.previous_epoch,
                             m.instance_id, m.rebalance_timeout_ms, client_id=m.client_id, client_host=m.client_host)
            if m.epoch != LEAVE_STATIC_EPOCH and member.owned - snapshot.target.get(member_id, frozenset()):
                member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
            restored._members[member_id] = member
        return restored

    # -- the machine ---------------------------------------------------------------------------
    def _check(self, member_id: str, member_epoch: int, owned: Set[TopicPartition] | None = None) -> _Member:
        """The member, when ``member_epoch`` is its epoch; a heartbeat (``owned`` given) may also
        carry its previous epoch with what it owned at it or less (the answer was lost)."""
        member = self._members.get(member_id)
        if member is None:
            raise UnknownMemberError(f"member {member_id!r} is not in group {self.group!r}")
        lost_answer = (owned is not None and member_epoch == member.previous_epoch != NO_EPOCH
                       and member.epoch != LEAVE_STATIC_EPOCH and set(owned) <= member.owned)
        if member_epoch != member.epoch and not lost_answer:
            raise FencedMemberError(
                f"member {member_id!r} of group {self.group!r} sent epoch {member_epoch}, its epoch is {member.epoch}"
            )
        return member

    def _check_instance(self, member_id: str, instance_id: str) -> None:
        holder = self._holder_of(instance_id)
        if holder is not None and holder != member_id:
            raise FencedInstanceIdError(
                f"instance {instance_id!r} of group {self.group!r} is now member {holder!r}, not {member_id!r}")

    def _holder_of(self, instance_id: str) -> str | None:
        return next((m for m, member in self._members.items() if member.instance_id == instance_id), None)

    def _join_member(self, member_id: str, instance_id: str | None, subscription: frozenset[str], now_ms: int,
                     rebalance_timeout_ms: int | None) -> None:
        holder = None if instance_id is None else self._holder_of(instance_id)
        if holder is not None and self._members[holder].epoch == LEAVE_STATIC_EPOCH:
            self._take_over(holder, member_id, subscription)
            return
        if holder is not None and holder != member_id:
            raise UnreleasedInstanceIdError(
                f"instance {instance_id!r} of group {self.group!r} is held by live member {holder!r}: it must "
                "leave (epoch -2) or time out before another member joins with it")
        self._members.pop(member_id, None)  # a known member joining again restarted: it owns nothing
        self._members[member_id] = _Member(subscription, JOIN_EPOCH, now_ms + self._session_timeout_ms,
                                           instance_id=instance_id,
                                           rebalance_timeout_ms=rebalance_timeout_ms or REBALANCE_TIMEOUT_MS)
        self._retarget()

    def _take_over(self, holder: str, member_id: str, subscription: frozenset[str]) -> None:
        """``member_id`` becomes the static member ``holder`` left: its partitions, its epoch and
        its target, with no rebalance."""
        member = self._members.pop(holder)
        member.epoch, member.previous_epoch = member.previous_epoch, NO_EPOCH
        self._members[member_id] = member
        if holder in self._target:
            self._target[member_id] = self._target.pop(holder)
        if subscription != member.subscription:
            member.subscription = subscription
            self._retarget()

    def _leave_static(self, member_id: str, now_ms: int) -> HeartbeatAnswer:
        member = self._members.get(member_id)
        if member is None:
            raise UnknownMemberError(f"member {member_id!r} is not in group {self.group!r}")
        if member.epoch != LEAVE_STATIC_EPOCH:
            member.epoch, member.previous_epoch = LEAVE_STATIC_EPOCH, member.epoch
        member.session_deadline_ms = now_ms + self._session_timeout_ms
        member.revocation_deadline_ms = None
        return HeartbeatAnswer(member_id, LEAVE_STATIC_EPOCH, frozenset())

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

    def _answer(self, member_id: str, member: _Member, now_ms: int) -> HeartbeatAnswer:
        target = self._target.get(member_id, frozenset())
        owned_by_others = set().union(*(m.owned for other, m in self._members.items() if other != member_id))
        granted = {p for p in target if p not in owned_by_others}
        member.owned |= granted
        assert not member.owned & owned_by_others, (member_id, member.owned & owned_by_others)
        if member.owned <= target:
            member.revocation_deadline_ms = None
            if member.epoch != self.group_epoch:
                # Nothing left to revoke: the member reached the target. Should this answer be
                # lost, its retry at the old epoch reporting what it owns is still this member.
                member.previous_epoch, member.epoch = member.epoch, self.group_epoch
        elif member.revocation_deadline_ms is None:  # told to revoke now: it has a rebalance timeout
            member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
        return HeartbeatAnswer(member_id, member.epoch, frozenset(member.owned & target))
