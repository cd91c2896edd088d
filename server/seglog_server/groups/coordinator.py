"""The group coordinator of one service: the committed offsets (``OffsetsLog`` over the internal
``__consumer_offsets`` topic) and the membership of each group (``GroupReconciliation``).

``start`` replays each partition of the compacted topic into memory when the topic exists and
creates nothing otherwise: the topic is created on the first commit or join (as Kafka creates it
on the first FindCoordinator), once among concurrent first callers and outside the coordinator's
lock; until then a fetch answers no offset.
A commit is checked against the group's membership (a fenced or unknown member is refused) and
appended as one batch to the group's offsets partition; it reaches the map once durable (its flush
done: offsets_log.py), so a fetch, a lag, a describe or a member the partition is handed to reads
only offsets a restart keeps, and a commit whose flush fails leaves the map as it was. A heartbeat joins, keeps or leaves a member; the assignment follows
the subscribed topics' partition counts as they are now. ``expire_sessions`` (the service's
timer) removes members whose session ran out, ``expire_offsets`` (maintenance) tombstones the
offsets of groups without members after offsets.retention.minutes.

Membership is written too, as KIP-848's records (membership_records.py): after each call that
changes a group, the records that differ from the ones last written go to the group's offsets
partition as one batch (a heartbeat answers once they are durable, as a commit does), and
``start`` rebuilds each group with members from them, every session counted from the load: a
member heartbeating with its epoch after a restart carries on, one that never comes back is
removed a session timeout after the restart.

A change of membership counts only once its records are durable, as Kafka's coordinator reverts
its in-memory state to the last committed offset when a write fails: each call saves the group
as it was before (``_Saved``) and puts it back exactly when its append fails, so the member's
error and the group agree. A write appended but not yet fsynced stays pending (``_unsettled``,
per offsets partition, until the log's recovery point passes it); should its flush fail, the rpc
layer calls ``write_failed`` and every group changed by the pending writes that flush covered (same
log, ending at or below its target, still not durable) is put back as it was before the first of
them (a later write of the same group with it; other later writes wait on their own flush); the records that undo the change are appended while the log
takes writes, else the group's replayed records are set back too (the log takes no more writes
until a restart, whose replay may or may not find the unsynced records: an answer that failed,
as a timeout in Kafka). A heartbeat that changes nothing answers once its group's own pending
writes are durable, and with their error if a failed flush put them back; another group's writes
on the same partition decide nothing of its answer (neither a failure of theirs nor a success).

Every call holds one lock: calls arrive on the service's storage threads, and a commit's
membership check, append and apply must not interleave with a heartbeat fencing the member.
No gRPC here: the rpc layer (rpc/group_rpcs.py) converts requests and maps errors.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from seglog_server.storage import Clock, LogManager
from seglog_server.storage.base.errors import LogDirOfflineError, StorageError, UnknownTopicOrPartitionError
from seglog_server.storage.base.topic_partition import TOPIC_NAME_LENGTH_MAX

from . import _wire, membership_records
from .assignor import TopicPartition
from .errors import GroupNotEmptyError, GroupNotFoundError, InvalidGroupRequestError, UnknownMemberError
from .lag_age import BatchTimestamps
from .offsets_log import OFFSETS_TOPIC, Appended, OffsetsLog
from .offsets_state import OFFSETS_RETENTION_MS
from .partitioning import OFFSETS_TOPIC_PARTITIONS, partition_for
from .reconciliation import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    GroupReconciliation,
    GroupSnapshot,
    HeartbeatAnswer,
)
from .records import NO_LEADER_EPOCH, OffsetCommitValue, encode_key, encode_value

__all__ = [
    "INTERNAL_TOPICS",
    "SESSION_TIMEOUT_MS",
    "HEARTBEAT_INTERVAL_MS",
    "GroupCoordinator",
    "GroupDescription",
    "GroupMetrics",
    "OffsetCommit",
]

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
# Kafka's group.consumer.session.timeout.ms and group.consumer.heartbeat.interval.ms defaults.
SESSION_TIMEOUT_MS = 45_000
HEARTBEAT_INTERVAL_MS = 5_000
# Kafka's metadata string limit (offset.metadata.max.bytes).
METADATA_BYTES_MAX = 4096
# A member's client.id, kept in memory and in its records and shown by DescribeGroup: Kafka sets no
# limit below its strings' 16-bit length; this one leaves room for the client's default
# (consumer-<group>-<n>) of a long group id.
CLIENT_ID_BYTES_MAX = 1024
# The ids a client names (group id, member id, instance id) are Kafka STRINGs in the group's
# records: an int16 length, so at most 32,767 UTF-8 bytes; a longer one is refused at the call,
# not met by the encoder after the group changed.
ID_BYTES_MAX = _wire.STRING_BYTES_MAX
# A subscribed or committed topic is a topic name: a longer one can never exist here (seglog's and
# Kafka's limit), and each subscribed name is written into the member's record.
assert TOPIC_NAME_LENGTH_MAX <= ID_BYTES_MAX
_UTF8_BYTES_PER_CHAR_MAX = 4


@dataclass(frozen=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""


@dataclass(frozen=True)
class GroupDescription:
    group: str
    group_epoch: int
    members: dict[str, frozenset[TopicPartition]]  # member -> what it owns now
    subscriptions: dict[str, frozenset[str]]
    offsets: dict[TopicPartition, OffsetCommitValue]
    member_epochs: dict[str, int] = field(default_factory=dict)
    instance_ids: dict[str, str] = field(default_factory=dict)  # static members' group.instance.id
    clients: dict[str, tuple[str, str]] = field(default_factory=dict)  # member -> (client.id, host)
    # Kafka's consumer group states (KIP-848): Stable (every member owns its target), Reconciling,
    # Empty (no members, offsets kept), Dead (nothing known of the group).
    state: str = "Dead"


@dataclass(frozen=True)
class GroupMetrics:
    """What a /metrics scrape shows of the groups, each family capped at ``cap`` series."""

    lags: dict[tuple[str, str, int], int]  # (group, topic, partition) -> log end - committed
    lag_seconds: dict[tuple[str, str, int], float]  # -> age of the first uncommitted record
    members: dict[str, int]  # group -> member count
    states: dict[str, str]  # group -> Stable, Reconciling, Empty
    rebalances: dict[str, int]  # group -> group epoch bumps since this service started


@dataclass
class _Saved:
    """A group as it was before a call changed it: put back should the call's write fail."""

    group: str
    members: GroupReconciliation | None  # a copy, deadlines included (unused with member_id)
    rebalances: int | None
    records: dict[tuple[int, str], Any]  # its KIP-848 records as replayed then (member_id's only, with it)
    # A call that changes one member only (a steady or reconciling heartbeat): that member's copy
    # alone is kept, not the whole group's (a copy a heartbeat would cost O(members)).
    member_id: str | None = None
    member: Any = None


def _fresh(error: BaseException) -> BaseException:
    """A new exception of ``error``'s class and arguments, without its traceback (the same object
    if it cannot be rebuilt)."""
    try:
        fresh = copy.copy(error)
    except Exception:
        return error
    fresh.__cause__, fresh.__suppress_context__ = error.__cause__, True
    return fresh


@dataclass
class _Unsettled:
    """A membership write appended, not yet known durable, and the group before it."""

    appended: Appended
    saved: _Saved


class GroupCoordinator:
    def __init__(self, manager: LogManager, clock: Clock, *, partitions: int = OFFSETS_TOPIC_PARTITIONS,
                 session_timeout_ms: int = SESSION_TIMEOUT_MS, heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS,
                 retention_ms: int = OFFSETS_RETENTION_MS) -> None:
        assert session_timeout_ms > 0 and heartbeat_interval_ms > 0
        self._manager = manager
        self._clock = clock
        self._offsets = OffsetsLog(manager, clock, partitions=partitions, retention_ms=retention_ms)
        self._session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._groups: dict[str, GroupReconciliation] = {}
        # Group epoch bumps (a member joined, left or timed out, a subscribed topic grew) per
        # group since start: Kafka's rebalance count. Kept while the group is empty.
        self._rebalances: dict[str, int] = {}
        self._timestamps = BatchTimestamps(manager)
        # Offsets partition -> its membership writes not yet known durable, in write order.
        self._unsettled: dict[int, list[_Unsettled]] = {}
        self._lock = threading.Lock()
        # Held while a failed flush decides and marks the writes it puts back, and by a caller
        # checking its write (``check_written``) without the coordinator's lock: a write is either
        # marked, or was durable before the decision (and so not put back).
        self._undone_lock = threading.Lock()

    @property
    def session_timeout_ms(self) -> int:
        return self._session_timeout_ms

    def start(self) -> None:
        """Loads every partition of the internal topic by replay when it exists (refused with
        another partition count); creates nothing."""
        with self._lock:
            self._offsets.open()
            for partition in range(self._offsets.partition_count):
                self._restore_groups(partition)

    def _restore_groups(self, partition: int) -> None:
        """Rebuilds each group with members of a loaded offsets partition from its records."""
        state = self._offsets.state(partition)
        now_ms = self._clock.time_ms()
        for group in state.consumer_groups():
            snapshot = membership_records.snapshot_of(state.consumer_group_records(group))
            if snapshot is not None:
                self._groups[group] = GroupReconciliation.restore(
                    group, snapshot, now_ms, session_timeout_ms=self._session_timeout_ms)

    def _persist(self, group: str, saved: _Saved | None) -> Appended | None:
        """Writes the group's membership records that changed since the last write, in one batch
        (tombstones for the ones gone), pending until durable with the group as ``saved`` held
        it (None: not tracked). A call that changed one member only (``saved.member_id``: a steady
        or revoking heartbeat) builds and compares that member's records alone, not every
        member's (O(1), not O(members), per heartbeat); without changes, the group's own last pending
        write (None: none pending), for the answer to wait on and check: never another group's, whose
        failed flush would fail a call that changed nothing of it, or whose successful one would
        answer a call whose group a failed flush put back. Under the lock."""
        members = self._groups.get(group)
        one = None if saved is None or saved.member_id is None or members is None else (
            members.member_snapshot(saved.member_id))
        if one is not None:  # a call that changed one member only: its records alone are compared
            wanted = membership_records.member_records_of(saved.member_id, *one)
            written = self._offsets.state_of(group).consumer_group_records_at(group, wanted.keys())
        else:
            wanted = membership_records.records_of(members.snapshot()) if members is not None else {}
            written = self._offsets.state_of(group).consumer_group_records(group)
        changes = [(encode_key(membership_records.key_of(group, slot)), encode_value(value))
                   for slot, value in sorted(wanted.items()) if written.get(slot) != value]
        changes += [(encode_key(membership_records.key_of(group, slot)), None)
                    for slot in sorted(written.keys() - wanted.keys())]
        last = self._last_pending_of(group)  # also drops the partition's writes now durable
        if not changes:
            return last
        appended = self._offsets.write(group, changes)
        if saved is not None and appended is not None:
            self._unsettled.setdefault(self.offsets_partition_of(group), []).append(_Unsettled(appended, saved))
        return appended

    def _last_pending_of(self, group: str) -> Appended | None:
        """The group's own last membership write not yet durable (None: none). Under the lock."""
        mine = [entry for entry in self._pending(self.offsets_partition_of(group)) if entry.saved.group == group]
        return mine[-1].appended if mine else None

    def _pending(self, partition: int) -> list[_Unsettled]:
        """The partition's writes not yet durable (the ones its log's recovery point passed are
        dropped). Under the lock."""
        pending = [entry for entry in self._unsettled.get(partition, ())
                   if entry.appended.log.recovery_point < entry.appended.end_offset]
        if pending:
            self._unsettled[partition] = pending
        else:
            self._unsettled.pop(partition, None)
        return pending

    def _save(self, group: str, member_id: str | None = None) -> _Saved:
        """The group as it is (``member_id``: that member of it only, the one call to come
        changes nothing else)."""
        members = self._groups.get(group)
        if member_id is not None and members is not None:
            return _Saved(group, None, self._rebalances.get(group), self._offsets.state_of(group).consumer_group_records_at(
                group, membership_records.member_slots(member_id)), member_id, members.copy_member(member_id))
        return _Saved(group, None if members is None else members.copy(), self._rebalances.get(group),
                      self._offsets.state_of(group).consumer_group_records(group))

    def _put_back_records(self, saved: _Saved) -> None:
        """The group's records in memory as ``saved`` holds them (the log takes no writes)."""
        state = self._offsets.state_of(saved.group)
        records = saved.records
        if saved.member_id is not None:
            slots = set(membership_records.member_slots(saved.member_id))
            records = {slot: value for slot, value in state.consumer_group_records(saved.group).items()
                       if slot not in slots} | saved.records
        state.replace_consumer_group_records(saved.group, records)

    def _put_back(self, saved: _Saved) -> None:
        """The group's membership (and rebalance count) as ``saved`` holds it."""
        if saved.member_id is not None:
            members = self._groups.get(saved.group)
            if members is not None:
                members.put_member(saved.member_id, saved.member)
        elif saved.members is None:
            self._groups.pop(saved.group, None)
        else:
            self._groups[saved.group] = saved.members.copy()
        if saved.rebalances is None:
            self._rebalances.pop(saved.group, None)
        else:
            self._rebalances[saved.group] = saved.rebalances

    def check_written(self, appended: Appended) -> None:
        """Raises the flush's error when a failed flush put back the membership write ``appended``
        (a call's own, or the pending one a call without changes waited on) after its caller's own
        flush succeeded: the flush of an earlier write failed and undid it (``write_failed``). Each
        caller raises its own copy (same class, message and status), never the one object several
        callers on other threads would raise at once, mixing their tracebacks into it."""
        with self._undone_lock:
            error = appended.undone[0] if appended.undone else None
        if error is not None:
            raise _fresh(error)

    def write_failed(self, appended: Appended, error: BaseException | None = None) -> list[str]:
        """A membership write, or one a heartbeat waited on, did not become durable (its flush
        failed): the pending writes that flush covered (on the same log, ending at or below
        ``appended``) and the log's recovery point still has not passed are put back, each group
        as it was before the first of them, and the records undoing them appended; if the log
        takes no writes (offline), the group's records in memory are set back instead. A later
        pending write of a group put back goes back with it (it was made on top of the undone
        one); any other later write is decided by its own flush. Each write put back carries
        ``error`` (the flush's), which every call answering on it raises (``check_written``), even
        once its own flush succeeded. Returns the groups put back."""
        with self._lock:
            partition = appended.log.partition
            with self._undone_lock:  # decided and marked at once (``check_written``)
                pending = self._pending(partition)
                covered = [entry for entry in pending if entry.appended.log is appended.log
                           and entry.appended.end_offset <= appended.end_offset]
                groups = {entry.saved.group for entry in covered}
                undone = [entry for entry in pending
                          if entry.saved.group in groups and entry.appended.log is appended.log]
                if error is not None:
                    for entry in undone:
                        if not entry.appended.undone:
                            entry.appended.undone.append(error)
            kept = [entry for entry in pending if entry not in undone]
            if kept:
                self._unsettled[partition] = kept
            else:
                self._unsettled.pop(partition, None)
            for entry in reversed(undone):  # the latest first: each puts back what its call changed
                self._put_back(entry.saved)
            for group in sorted(groups):
                try:
                    self._persist(group, None)
                except Exception:  # the log takes no writes: memory mirrors what may be durable
                    for entry in reversed(undone):
                        if entry.saved.group == group:
                            self._put_back_records(entry.saved)
            return sorted(groups)

    @property
    def offsets_topic_created(self) -> bool:
        return self._offsets.created

    # -- offsets ------------------------------------------------------------------------------
    def commit(self, group: str, member_id: str, member_epoch: int, offsets: Sequence[OffsetCommit]
               ) -> Appended | None:
        """Checks and appends the commit; returns where it landed, for the caller to wait until it
        is durable before answering (None: nothing written)."""
        _check_group(group)
        _check_string("member id", member_id, ID_BYTES_MAX)
        for commit in offsets:
            _check_string("topic", commit.topic, TOPIC_NAME_LENGTH_MAX)
            if commit.offset < 0:
                raise InvalidGroupRequestError(
                    f"offset {commit.offset} for {commit.topic}-{commit.partition}: a committed offset is >= 0")
            if len(commit.metadata.encode()) > METADATA_BYTES_MAX:
                raise InvalidGroupRequestError(
                    f"metadata for {commit.topic}-{commit.partition} is above {METADATA_BYTES_MAX} bytes")
            self._check_partition(commit.topic, commit.partition)
        self._offsets.ensure_created()
        with self._lock:
            members = self._groups.get(group)
            if member_id:
                if members is None:
                    raise UnknownMemberError(f"member {member_id!r} is not in group {group!r}")
                members.check_commit(member_id, member_epoch)
            elif members is not None and members.members():
                raise GroupNotEmptyError(
                    f"group {group!r} has {len(members.members())} members: only they commit (send the "
                    "member id and epoch), a commit without a member id is for groups without members")
            now_ms = self._clock.time_ms()
            return self._offsets.commit(group, {
                (c.topic, c.partition): OffsetCommitValue(c.offset, now_ms, c.metadata, c.leader_epoch)
                for c in offsets
            })

    def fetch(self, group: str, partitions: Iterable[TopicPartition] | None = None
              ) -> list[tuple[TopicPartition, OffsetCommitValue | None]]:
        """The committed value of each partition asked for (None where none), or every partition
        the group has an offset for, sorted."""
        _check_group(group)
        with self._lock:
            state = self._offsets.state_of(group)
            if partitions is None:
                return sorted(state.group_offsets(group).items())
            return [((topic, partition), state.committed(group, topic, partition)) for topic, partition in partitions]

    def expire_offsets(self) -> int:
        """Tombstones the expired offsets (``OffsetsLog.expire``: not an offset with a commit
        appended and not yet durable, whose committer may be answered next) and flushes them
        outside the lock: they leave the map once durable."""
        with self._lock:
            live = {group for group, members in self._groups.items() if members.members()}
            written = self._offsets.expire(live)
            ends = self._offsets.undurable_ends() if written else []
        for log, end_offset in ends:
            self._flush(log, end_offset)
        return written

    def _flush(self, log: Any, end_offset: int) -> None:
        """Flushes an offsets partition up to ``end_offset`` (an I/O error takes its directory
        offline, as any log call's)."""
        try:
            log.flush(end_offset)
        except LogDirOfflineError as exc:
            self._manager.handle_log_failure(log, exc)
            raise

    # -- membership ---------------------------------------------------------------------------
    def heartbeat(self, group: str, member_id: str, member_epoch: int, *, subscription: Set[str] | None,
                  owned: Set[TopicPartition] = frozenset(), instance_id: str | None = None,
                  rebalance_timeout_ms: int | None = None, client_id: str | None = None,
                  client_host: str | None = None) -> HeartbeatAnswer:
        """Joins, keeps or leaves a member (``client_id``, ``client_host``: its client.id and the
        address the call came from, kept in its records; None: as they were); the answer's ``written`` is where the change of the
        group's records landed (None: nothing changed), for the caller to wait until durable."""
        _check_group(group)
        if member_epoch < LEAVE_STATIC_EPOCH:
            raise InvalidGroupRequestError(
                f"member epoch {member_epoch}: 0 joins, -1 leaves, -2 leaves a static member, else the last answer's")
        if member_epoch == LEAVE_STATIC_EPOCH and not member_id:
            raise InvalidGroupRequestError("member id is empty: only a join (member epoch 0) may leave it out")
        if rebalance_timeout_ms is not None and rebalance_timeout_ms <= 0:
            raise InvalidGroupRequestError(f"rebalance timeout {rebalance_timeout_ms} ms: it is > 0 (or unset)")
        _check_member_strings(member_id, instance_id, subscription)
        _check_string("client id", client_id, CLIENT_ID_BYTES_MAX)
        if member_epoch == JOIN_EPOCH:
            if not subscription:
                raise InvalidGroupRequestError("a member joins with at least one subscribed topic")
            member_id = member_id or str(uuid.uuid4())
            self._offsets.ensure_created()  # a group is born: its commits follow
        elif not member_id:
            raise InvalidGroupRequestError("member id is empty: only a join (member epoch 0) may leave it out")
        topics = set(subscription or ())
        with self._lock:
            members = self._groups.get(group)
            if members is None and member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
                return HeartbeatAnswer(member_id, LEAVE_EPOCH, frozenset())
            if members is None and member_epoch != JOIN_EPOCH:
                raise UnknownMemberError(f"member {member_id!r} is not in group {group!r}")
            counts = None
            if member_epoch not in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
                if members is not None:
                    topics |= set().union(*members.subscriptions().values())
                counts = self._partition_counts(topics)
            local = (members is not None and counts is not None
                     and members.member_local(member_id, member_epoch, subscription, counts))
            saved = self._save(group, member_id if local else None)
            try:  # a refused call or a failed write leaves the group exactly as it was
                created = members is None
                if members is None:
                    members = self._groups[group] = GroupReconciliation(
                        group, {}, session_timeout_ms=self._session_timeout_ms)
                epoch = members.group_epoch
                if counts is not None:
                    members.set_partition_counts(counts)
                    if created:  # a new group learning its topics is not a rebalance; its first join is
                        epoch = members.group_epoch
                answer = members.heartbeat(member_id, member_epoch, self._clock.time_ms(),
                                           subscription=subscription or None, owned=owned,
                                           instance_id=instance_id, rebalance_timeout_ms=rebalance_timeout_ms,
                                           client_id=client_id, client_host=client_host)
                self._count_rebalances(group, members.group_epoch - epoch)
                if not members.members():
                    del self._groups[group]
                return dataclasses.replace(answer, written=self._persist(group, saved))
            except BaseException:
                self._put_back(saved)
                raise

    def expire_sessions(self) -> list[tuple[str, str]]:
        """Removes members whose session timed out; returns (group, member) of each."""
        now_ms = self._clock.time_ms()
        gone: list[tuple[str, str]] = []
        with self._lock:
            for group, members in list(self._groups.items()):
                if not members.expiring(now_ms):
                    continue
                saved = self._save(group)
                epoch = members.group_epoch
                expired = members.expire_sessions(now_ms)
                self._count_rebalances(group, members.group_epoch - epoch)
                if not members.members():
                    del self._groups[group]
                if not expired:
                    continue
                try:
                    self._persist(group, saved)
                except Exception:  # not written: the members stay until a timer's write succeeds
                    self._put_back(saved)
                    continue
                gone += [(group, member) for member in expired]
        return gone

    def _count_rebalances(self, group: str, bumps: int) -> None:
        if bumps > 0:
            self._rebalances[group] = self._rebalances.get(group, 0) + bumps

    # -- operators ----------------------------------------------------------------------------
    def delete_group(self, group: str, check_topics: Callable[[Set[str]], None] | None = None) -> int:
        """Deletes a group without members, as Kafka's DeleteGroups: tombstones for each of its
        committed offsets (and its metadata record), in one batch. Refused with members
        (GroupNotEmptyError, Kafka's NON_EMPTY_GROUP) and for a group the service does not know
        (GroupNotFoundError, GROUP_ID_NOT_FOUND). ``check_topics`` (the caller's ACL) sees the
        topics of its offsets under the lock, before anything is written. A pending membership
        write of the group (its last member's leave, not yet durable) is flushed first: should it
        fail, the member is back with its offsets kept, and the call raises the flush's error.
        Answered once the tombstones are durable (the offsets leave the map then; a commit
        appended and not yet durable is tombstoned and counted too). Returns the offsets deleted."""
        _check_group(group)
        while True:
            with self._lock:
                waiting = self._delete_group(group, check_topics)
            if isinstance(waiting, tuple):  # deleted: answered once the tombstones are durable
                deleted, appended = waiting
                if appended is not None:
                    self._flush(appended.log, appended.end_offset)
                return deleted
            self._await_durable(waiting)

    def _await_durable(self, appended: Appended) -> None:
        """Flushes a pending membership write (outside the lock); a failed flush puts back what it
        covered (``write_failed``) and raises."""
        try:
            appended.log.flush(appended.end_offset)
        except LogDirOfflineError as exc:
            self._manager.handle_log_failure(appended.log, exc)
            self.write_failed(appended, exc)
            raise
        except StorageError as exc:
            self.write_failed(appended, exc)
            raise
        self.check_written(appended)

    def _delete_group(self, group: str, check_topics: Callable[[Set[str]], None] | None
                      ) -> tuple[int, Appended | None] | Appended:
        """``delete_group`` under the lock (the offsets deleted and where the tombstones landed),
        or the group's last pending membership write to wait for first: a leave not yet durable
        may still be put back (its member with its offsets)."""
        members = self._members_of(group)
        if members:
            raise GroupNotEmptyError(
                f"group {group!r} has {len(members)} active members: only a group without members is "
                "deleted (stop its consumers, or wait for their sessions to time out)")
        pending = self._last_pending_of(group)
        if pending is not None:
            return pending
        if not self._offsets.created:
            raise GroupNotFoundError(f"group {group!r} does not exist")
        state = self._offsets.state_of(group)
        offsets = state.group_offsets(group)
        records = state.consumer_group_records(group)
        # A commit appended and not yet durable is tombstoned too: should it become durable, the
        # tombstones after it still delete it (the map and the replay agree).
        undurable = self._offsets.undurable_offsets(group) - offsets.keys()
        if not offsets and not undurable and state.group_metadata(group) is None and not records:
            raise GroupNotFoundError(f"group {group!r} does not exist")
        if check_topics is not None:
            check_topics({topic for topic, _ in offsets.keys() | undurable})
        appended = self._offsets.delete_group(group, sorted(offsets.keys() | undurable), [
            encode_key(membership_records.key_of(group, slot)) for slot in sorted(records)])
        self._rebalances.pop(group, None)
        return len(offsets.keys() | undurable), appended

    def metrics(self, cap: int, owns: Callable[[str, int], bool] | None = None) -> GroupMetrics:
        """The groups' figures for one scrape, each family's first ``cap`` series in name order.

        Lag in records is the map under the lock and the log ends outside it. Lag in seconds is
        now minus the timestamp of the batch holding the first uncommitted record (lag_age.py):
        one positioned read of the batch's 61-byte header per (partition, committed offset) not
        seen at the previous scrape, at most ``cap`` a scrape; 0 with no lag. ``owns``: as in
        ``log_end_offsets`` (a partition another instance owns has no lag series here)."""
        with self._lock:
            committed = {
                (group, topic, partition): value.offset
                for index in range(self._offsets.partition_count)
                for group in self._offsets.state(index).groups()
                for (topic, partition), value in self._offsets.state(index).group_offsets(group).items()
            }
            names = sorted(set(self._groups) | {group for group, _, _ in committed})[:cap]
            states = {name: self._state(name, has_offsets=True) for name in names}
            members = {name: len(self._members_of(name)) for name in names}
            rebalances = {name: self._rebalances.get(name, 0) for name in names}
        committed = dict(sorted(committed.items())[:cap])
        ends = self.log_end_offsets({(topic, partition) for _, topic, partition in committed}, owns)
        lags = {key: end - offset for key, offset in committed.items()
                if (end := ends[(key[1], key[2])]) is not None}
        now_ms = self._clock.time_ms()
        ages: dict[tuple[str, str, int], float] = {}
        with self._timestamps.scrape() as timestamps:
            for key, lag in lags.items():
                if lag <= 0:
                    ages[key] = 0.0
                elif (stamp := timestamps.at(key[1], key[2], committed[key])) is not None:
                    ages[key] = max(0, now_ms - stamp) / 1000
        return GroupMetrics(lags, ages, members, states, rebalances)

    def list_groups(self) -> list[str]:
        with self._lock:
            names = set(self._groups)
            for partition in range(self._offsets.partition_count):
                names.update(self._offsets.state(partition).groups())
            return sorted(names)

    def list_group_states(self) -> list[tuple[str, str, int]]:
        """(group, state, member count) of every group, sorted by name."""
        with self._lock:
            names = set(self._groups)
            for partition in range(self._offsets.partition_count):
                names.update(self._offsets.state(partition).groups())
            return [(name, self._state(name, has_offsets=True), len(self._members_of(name))) for name in sorted(names)]

    def log_end_offsets(self, partitions: Iterable[TopicPartition],
                        owns: Callable[[str, int], bool] | None = None) -> dict[TopicPartition, int | None]:
        """Each partition's log end offset, None where the partition is unknown or offline, or
        where ``owns`` (cluster mode: rpc/cluster_routing.ClusterRouting.owns) says another
        instance owns it: this instance's copy of it is empty, its end is the owner's to tell."""
        ends: dict[TopicPartition, int | None] = {}
        for topic, partition in partitions:
            if owns is not None and not owns(topic, partition):
                ends[(topic, partition)] = None
                continue
            try:
                ends[(topic, partition)] = self._manager.get_log(topic, partition).log_end_offset
            except StorageError:
                ends[(topic, partition)] = None
        return ends

    def describe(self, group: str) -> GroupDescription:
        _check_group(group)
        with self._lock:
            members = self._groups.get(group)
            offsets = self._offsets.state_of(group).group_offsets(group)
            return GroupDescription(
                group=group,
                group_epoch=members.group_epoch if members else 0,
                members=members.owners() if members else {},
                subscriptions=members.subscriptions() if members else {},
                offsets=offsets,
                member_epochs={m: members.member_epoch(m) for m in members.members()} if members else {},
                instance_ids=members.instance_ids() if members else {},
                clients=members.clients() if members else {},
                state=self._state(group, has_offsets=bool(offsets)),
            )

    def group_snapshot(self, group: str) -> GroupSnapshot | None:
        """Everything the coordinator holds of the group's membership (None: no members)."""
        with self._lock:
            members = self._groups.get(group)
            return None if members is None else members.snapshot()

    def _members_of(self, group: str) -> list[str]:
        members = self._groups.get(group)
        return members.members() if members is not None else []

    def _state(self, group: str, *, has_offsets: bool) -> str:
        members = self._groups.get(group)
        if members is None or not members.members():
            return "Empty" if has_offsets else "Dead"
        target = members.target()
        settled = all(owned == target.get(member, frozenset()) for member, owned in members.owners().items())
        return "Stable" if settled else "Reconciling"

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        counts = {}
        for topic in topics:
            try:
                described = self._manager.describe_topic(topic)
            except UnknownTopicOrPartitionError:
                continue  # not created yet: assigned once it is
            counts[topic] = len(described.partitions) + len(described.offline_partitions)
        return counts

    def _check_partition(self, topic: str, partition: int) -> None:
        self._manager.get_log(topic, partition)  # UnknownTopicOrPartitionError when missing

    # -- cluster mode: the offsets partitions this instance coordinates (rpc/group_routing.py) ---
    @property
    def offsets_partition_count(self) -> int:
        return self._offsets.partition_count

    def offsets_partition_of(self, group: str) -> int:
        return partition_for(group, self._offsets.partition_count)

    def load_offsets_partition(self, partition: int, leader_epoch: int | None = None) -> None:
        """Gained ``partition``: replays its log into a fresh map; its groups' members are
        rebuilt from their membership records, not kept from an earlier ownership. The topic is
        held locally first (the cluster created it; this instance's copy may not be made yet).
        Its appends carry ``leader_epoch``, the ownership epoch (stamped, fenced by the log)."""
        self._offsets.ensure_created()
        with self._lock:
            self._offsets.load_partition(partition, leader_epoch)
            self._unsettled.pop(partition, None)
            self._drop_groups_of(partition)
            self._restore_groups(partition)

    def unload_offsets_partition(self, partition: int) -> None:
        """Lost ``partition``: its offsets leave the map and its groups' members are dropped (the
        new owner coordinates them; refused calls here carry its hint)."""
        with self._lock:
            self._offsets.unload_partition(partition)
            self._unsettled.pop(partition, None)
            self._drop_groups_of(partition)

    def _drop_groups_of(self, partition: int) -> None:
        for group in [g for g in self._groups if partition_for(g, self._offsets.partition_count) == partition]:
            del self._groups[group]
            self._rebalances.pop(group, None)


def _check_group(group: str) -> None:
    if not group:
        raise InvalidGroupRequestError("group id is empty")
    _check_string("group id", group, ID_BYTES_MAX)


def _check_string(field: str, value: str | None, bytes_max: int) -> None:
    """A client-sent string written into a record is at most ``bytes_max`` UTF-8 bytes, refused
    before anything changes (else its encoding fails halfway, after the group changed)."""
    if value is None or len(value) * _UTF8_BYTES_PER_CHAR_MAX <= bytes_max:
        return  # short enough whatever its characters: no encoding needed to know
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > bytes_max:
        raise InvalidGroupRequestError(f"{field} is {size} bytes (UTF-8): at most {bytes_max}")


def _check_member_strings(member_id: str, instance_id: str | None, subscription: Set[str] | None) -> None:
    _check_string("member id", member_id, ID_BYTES_MAX)
    _check_string("instance id", instance_id, ID_BYTES_MAX)
    for topic in subscription or ():
        _check_string("subscribed topic", topic, TOPIC_NAME_LENGTH_MAX)
