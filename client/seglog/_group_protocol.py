"""The group member's protocol with its coordinator: heartbeats (joining, the membership loop,
leaving, giving everything up when fenced) and commits (at the member epoch, retried once after a
heartbeat when a lost answer left it stale; deleted topics left out of the member's own). A part
of ``AsyncGroupConsumer`` (group_consumer.py), which owns the partitions, readers and callbacks
these steps change; they run under its lock (docs/consumer-groups.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from seglog.client import Transport
from seglog.errors import FailedPreconditionError, SeglogError, TopicNotFoundError
from seglog.structs import TopicPartition
from seglog.v1 import log_service_pb2 as pb

_T = TypeVar("_T")
_JOIN, _LEAVE = 0, -1
# KIP-848's static leave: a static member (group_instance_id) going away for a while (a restart)
# leaves with -2, and the service keeps its partitions for the session timeout instead of
# reassigning them; a join with the same instance id within it takes them back.
_LEAVE_STATIC = -2
# What an older service (before static membership) answers a -2 leave; the member then leaves
# with -1 (its partitions move at once, as a dynamic member's).
_STATIC_LEAVE_REFUSED = "InvalidGroupRequestError"
# Kafka's group.consumer.session.timeout.ms; the service's own replaces it from the first answer.
SESSION_TIMEOUT_MS_DEFAULT = 45000
# The service's error classes (``seglog-error`` trailer) that mean this member must rejoin (KIP-848's
# UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH); other NOT_FOUND/FAILED_PRECONDITION answers (a topic
# deleted under a commit, a refusal of the mode) leave the membership alone.
_MEMBER_ERRORS = frozenset({"UnknownMemberError", "FencedMemberError"})
# A retriable failure of the membership loop (the coordinator away or moving) is tried again after
# at most this, not after a whole heartbeat interval.
_RETRY_S = 0.5
_log = logging.getLogger("seglog.group_consumer")


class CommitFailedError(FailedPreconditionError):
    """Kafka's CommitFailedException: ``commit()`` of offsets the service did not take from this
    member. ``uncommitted`` holds them (partition -> offset), none of them committed;
    ``service_error`` is the refusal's kind ("FencedMemberError", "UnknownMemberError"; None when
    the member named a partition it does not own and nothing was sent), the refusal its cause."""

    def __init__(self, message: str, *, uncommitted: dict[TopicPartition, int],
                 refusal: SeglogError | None = None) -> None:
        super().__init__(message, code=None if refusal is None else refusal.code,
                         service_error=None if refusal is None else refusal.service_error)
        self.uncommitted = dict(uncommitted)


class RebalanceCallbackError(SeglogError):
    """Kafka's KafkaException "User rebalance callback throws an error": ``callback`` (the
    application's ``on_revoke``) raised while the member gave ``partitions`` up because it was
    fenced (``service_error`` the service's refusal, "FencedMemberError" or "UnknownMemberError";
    None when its session ran out unheard). The partitions are given up all the same and the member
    rejoins; the callback's exception is the cause. Raised by the next poll."""

    def __init__(self, message: str, *, callback: str, partitions: list[TopicPartition],
                 service_error: str | None) -> None:
        super().__init__(message, service_error=service_error)
        self.callback = callback
        self.partitions = list(partitions)


class GroupProtocol:
    """Heartbeats and commits of ``AsyncGroupConsumer`` (its base: the state below is the
    consumer's, as are ``_carry_out``, ``_revoke``, ``_drop``, ``_call_on_revoke`` and
    ``_auto_commit_consumed``, which these steps call)."""

    group_id: str
    member_id: str
    member_epoch: int
    group_instance_id: str | None
    client_id: str
    session_timeout_ms: int
    _topics: list[str]
    _transport: Transport | None
    _lock: asyncio.Lock | None
    _owned: set[tuple[str, int]]
    _error: BaseException | None
    _wake: asyncio.Event
    _auto_commit: bool
    _auto_commit_s: float
    _last_heartbeat_ok: float

    # -- membership -------------------------------------------------------------------------------
    async def _run(self, interval_s: float) -> None:
        # Two clocks: heartbeats at the interval the service asks for, auto-commits at their own
        # interval (Kafka's auto.commit.interval.ms), whichever is due first wakes the loop.
        loop = asyncio.get_running_loop()
        next_heartbeat = loop.time() + interval_s
        next_commit = loop.time() + self._auto_commit_s
        while True:
            due = min(next_heartbeat, next_commit) if self._auto_commit else next_heartbeat
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, due - loop.time()))
            if self._wake.is_set():
                self._wake.clear()
                next_heartbeat = loop.time()
            committing = False
            try:
                if self._auto_commit and loop.time() >= next_commit:
                    # Moved before the call: a failing commit is retried an interval later, not in a spin.
                    next_commit = loop.time() + self._auto_commit_s
                    if self.member_epoch > 0:
                        committing = True
                        await self._auto_commit_consumed()
                        committing = False
                if loop.time() >= next_heartbeat:
                    wait_s = await self._heartbeat()  # 0: a revocation to report now
                    interval_s = wait_s or interval_s
                    next_heartbeat = loop.time() + wait_s
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - fenced: rejoin; retriable: retry; else to the next poll
                retriable = getattr(exc, "retriable", False)
                if next_heartbeat <= loop.time():  # the heartbeat failed: try again (sooner if retriable)
                    next_heartbeat = loop.time() + (min(interval_s, _RETRY_S) if retriable else interval_s)
                if getattr(exc, "service_error", None) in _MEMBER_ERRORS and committing:
                    # An auto-commit refused its member epoch: stale after a lost heartbeat answer
                    # (the service moved the member on), or fenced. Kafka answers such a commit
                    # STALE_MEMBER_EPOCH and leaves the membership to the heartbeat: sent now, it
                    # is accepted at the previous epoch, or fenced and the member rejoins.
                    _log.info("group %s: auto-commit refused, heartbeating now: %s", self.group_id, exc)
                    next_heartbeat = loop.time()
                elif getattr(exc, "service_error", None) in _MEMBER_ERRORS:
                    await self._rejoin(exc)
                    next_heartbeat = loop.time()
                else:
                    # A coordinator away (UNAVAILABLE, a timeout, a move) is retried here, as Kafka's
                    # consumer does, not handed to poll; the session clock still runs out below.
                    if retriable:
                        _log.info("group %s: heartbeat or auto-commit failed, retrying: %s", self.group_id, exc)
                    else:
                        self._error = exc
                    assert self._lock is not None
                    async with self._lock:
                        await self._lapse_if_cut_off()

    async def _heartbeat(self) -> float:
        """One heartbeat and what its answer asks: returns the wait before the next one (0 when
        a revocation must be reported now)."""
        assert self._lock is not None
        async with self._lock:
            return await self._heartbeat_locked()

    async def _heartbeat_locked(self) -> float:
        """Under the lock: ``_heartbeat``."""
        return await self._carry_out(await self._send_heartbeat())

    async def _send_heartbeat(self) -> pb.HeartbeatResponse:
        """Under the lock: one heartbeat; its answer's member id, epoch and session timeout taken,
        its assignment left to ``_carry_out``."""
        assert self._transport is not None
        # The service's session deadline runs from when it handled the heartbeat, which is no
        # earlier than its send: counting from the answer's arrival would lapse late by the
        # round trip, after the service may have handed the partitions on.
        sent_at = asyncio.get_running_loop().time()
        answer = await self._transport.heartbeat(self._request(
            self.member_epoch, subscribed_topics=self._topics,
            owned_partitions=[pb.GroupPartition(topic=t, partition=p) for t, p in sorted(self._owned)]))
        self._last_heartbeat_ok = sent_at
        if answer.session_timeout_ms > 0:  # 0: a service that does not tell it
            self.session_timeout_ms = answer.session_timeout_ms
        self.member_id, self.member_epoch = answer.member_id, answer.member_epoch
        return answer

    async def _lapse_if_cut_off(self) -> None:
        """Under the lock: no heartbeat answered for the session timeout, so the service has
        removed this member and may have handed its partitions on. Give them up, uncommitted,
        and let the next heartbeat rejoin (same member id)."""
        if self.member_epoch == _JOIN:
            return
        if asyncio.get_running_loop().time() - self._last_heartbeat_ok >= self.session_timeout_ms / 1000:
            await self._give_up(f"cut off from heartbeats for the session timeout ({self.session_timeout_ms} ms): "
                                "the service has removed it", None)

    async def _rejoin(self, fenced: Exception) -> None:
        assert self._lock is not None
        async with self._lock:
            kind = getattr(fenced, "service_error", None)
            await self._give_up(f"fenced by the service ({kind}: {fenced})", kind)

    async def _give_up(self, why: str, service_error: str | None) -> RebalanceCallbackError | None:
        """Under the lock: fenced or unknown (the session ran out, ``why``): give everything up,
        uncommitted (another member may own it already), and join again, as Kafka's consumer does.
        ``on_revoke`` raising does not stop it (the partitions are not this member's any more,
        whatever the application's callback says): its error, wrapped in a
        ``RebalanceCallbackError`` naming the callback and why, is raised by the next poll (Kafka
        raises the listener's exception from poll, wrapped) and returned."""
        lost = set(self._owned)
        failed = None
        try:
            self._call_on_revoke(lost)
        except Exception as error:  # noqa: BLE001 - the application's; raised by the next poll
            partitions = sorted(TopicPartition(t, p) for t, p in lost)
            failed = RebalanceCallbackError(
                f"group {self.group_id!r}, member {self.member_id!r}: on_revoke({_names(partitions)}) raised "
                f"{error!r} while the member gave its partitions up, {why}; they are given up all the same and the "
                "member rejoins", callback="on_revoke", partitions=partitions, service_error=service_error)
            failed.__cause__ = error
            _log.warning("%s", failed)
            if self._error is None:
                self._error = failed
            else:
                self._error.add_note(f"then: {failed}")
        # Out of the group before the drop awaits: its failure (a reader that does not close) must
        # not leave the member heartbeating at the epoch of the membership it gave up.
        self.member_epoch = _JOIN
        await self._drop(lost)
        return failed

    async def _leave(self) -> None:
        """The last heartbeat: -1 for a dynamic member, -2 for a static one (its partitions wait
        for it for the session timeout), -1 after all if the service does not know -2."""
        assert self._transport is not None
        if self.group_instance_id is not None:
            try:
                await self._transport.heartbeat(self._request(_LEAVE_STATIC))
                return
            except SeglogError as error:
                if error.service_error != _STATIC_LEAVE_REFUSED:
                    raise
        await self._transport.heartbeat(self._request(_LEAVE))

    def _request(self, member_epoch: int, **fields: Any) -> pb.HeartbeatRequest:
        """A heartbeat of this member: every one names its instance id when it is static."""
        return pb.HeartbeatRequest(group=self.group_id, member_id=self.member_id, member_epoch=member_epoch,
                                   instance_id=self.group_instance_id or "", client_id=self.client_id, **fields)

    # -- commits ---------------------------------------------------------------------------------
    async def _commit_at_current_epoch(self, offsets: dict[TopicPartition, int] | None = None, *,
                                       carry_out: bool = True) -> None:
        """Under the lock: ``commit()``'s and close's commit of ``offsets``, or of every owned
        partition's position (taken once, before the first attempt).

        Refused the member's epoch, the member may still be in the group: the service handled a
        heartbeat whose answer was lost and moved it on. One heartbeat at the epoch it knows is
        accepted as the previous epoch and answered with the current one; the same offsets are
        committed at it, and only then is the answer carried out (``carry_out``; close leaves
        instead). A partition the answer tells the member to give up is committed too: the
        service still holds it this member's (groups/reconciliation.py: ``owned`` shrinks only
        when a heartbeat stops reporting it, and nobody else is granted it before) and takes a
        commit at the current epoch whatever the partition (``check_commit`` checks the epoch
        alone), so its offset is this member's to commit, as KIP-1251 takes it at Kafka's broker
        (assigned at or before the epoch). Kafka's own client raises CommitFailedException at
        STALE_MEMBER_EPOCH instead (``commitSyncExceptionForError``)."""
        own = offsets is None
        if offsets is None:
            offsets = await self._owned_positions()
        else:
            self._check_owned(offsets)
        refused_at = self.member_epoch
        try:
            await self._commit_locked(offsets, skip_deleted_topics=own)
            return
        except SeglogError as error:
            if error.service_error not in _MEMBER_ERRORS:
                raise
            if refused_at <= 0:
                raise self._commit_failed(offsets, error, f"refused at member epoch {refused_at}") from error
            refused = error
        answer = await self._heartbeat_after_refusal(refused, offsets)
        try:
            await self._commit_locked(offsets, skip_deleted_topics=own)
        except SeglogError as error:
            if error.service_error not in _MEMBER_ERRORS:
                raise
            # The group moved again between the heartbeat and the commit: one retry only (a
            # commit that chases the epoch could go on for ever); the loop heartbeats now.
            self._wake.set()
            raise self._commit_failed(offsets, error, f"refused again at member epoch {self.member_epoch}") from error
        finally:
            # Whatever the commit's outcome, even cancelled: the epoch is the answer's, so its
            # assignment must be too.
            if carry_out:
                await self._carry_out_after_commit(answer)

    async def _commit_before_revoking(self, offsets: dict[TopicPartition, int]) -> None:
        """Under the lock: the auto-commit of the consumed positions of partitions about to be
        given up (Kafka's ``maybeAutoCommitSyncBeforeRevocation``). Refused the member's epoch
        (FencedMemberError), the member may still be in the group, its epoch stale after a lost
        heartbeat answer: one heartbeat at the epoch it knows learns the current one and the
        commit is retried at it, once, as ``_commit_at_current_epoch`` does. The answer is not
        carried out here (a revocation is under way): the loop, woken, heartbeats now and carries
        the next one out. Raises when nothing was committed: UnknownMemberError at once (Kafka's
        UNKNOWN_MEMBER_ID: no heartbeat brings the member back), ``CommitFailedError`` when the
        heartbeat failed (refused too, the member is fenced and has given everything up) or the
        retry was refused again."""
        refused_at = self.member_epoch
        try:
            await self._commit_locked(offsets, skip_deleted_topics=True)
            return
        except SeglogError as error:
            if error.service_error != "FencedMemberError" or refused_at <= 0:
                raise
            refused = error
        await self._heartbeat_after_refusal(refused, offsets)
        self._wake.set()  # the answer is the loop's to carry out
        try:
            await self._commit_locked(offsets, skip_deleted_topics=True)
        except SeglogError as error:
            if error.service_error not in _MEMBER_ERRORS:
                raise
            raise self._commit_failed(offsets, error, f"refused again at member epoch {self.member_epoch}") from error

    def _check_owned(self, offsets: dict[TopicPartition, int]) -> None:
        """The application's ``commit(offsets)`` names only partitions this member owns (those
        held for it pending revocation included), whatever the member epoch, so its outcome
        never hangs on a lost heartbeat answer: the service alone would take any partition at
        the current epoch and nothing at a stale one (aiokafka refuses these too)."""
        foreign = sorted(tp for tp in offsets if (tp.topic, tp.partition) not in self._owned)
        if foreign:
            raise CommitFailedError(
                f"group {self.group_id!r}, member {self.member_id!r}: nothing committed: {_names(foreign)} not "
                f"assigned to this member (it owns {_names(self.assignment()) or 'nothing'})", uncommitted=offsets)

    def _commit_failed(self, offsets: dict[TopicPartition, int], refused: SeglogError,
                       why: str) -> CommitFailedError:
        return CommitFailedError(
            f"group {self.group_id!r}, member {self.member_id!r}: the offsets of {_names(sorted(offsets))} are "
            f"not committed: {why}: {refused.message}", uncommitted=offsets, refusal=refused)

    async def _heartbeat_after_refusal(self, refused: SeglogError,
                                       offsets: dict[TopicPartition, int]) -> pb.HeartbeatResponse:
        """Under the lock: the heartbeat that learns the member's current epoch after ``refused``
        (a commit of ``offsets`` refused its epoch); its answer is taken (epoch, session), not
        yet carried out. It failing, ``CommitFailedError`` is raised, ``refused`` its cause and
        the heartbeat's error that one's: refused a member error too, the member is fenced for
        real and gives its partitions up (uncommitted: they may be another member's) to rejoin;
        unanswered, nothing is known and the membership stays with the heartbeat loop."""
        epoch = self.member_epoch
        try:
            answer = await self._send_heartbeat()
        except Exception as error:
            refused.__cause__ = error
            callback_failed = None
            if getattr(error, "service_error", None) in _MEMBER_ERRORS:
                why = f"fenced at member epoch {epoch} (its heartbeat was refused too): it gives its partitions up"
                self._wake.set()  # rejoin now, not an interval later
                callback_failed = await _to_the_end(self._give_up(
                    f"fenced at member epoch {epoch} (a commit and its heartbeat refused: {error})",
                    getattr(error, "service_error", None)))
            else:
                why = f"refused at member epoch {epoch}, and the heartbeat to learn the current one failed ({error!r})"
            failed = self._commit_failed(offsets, refused, why)
            if callback_failed is not None:
                failed.add_note(f"on_revoke raised as the partitions were given up (raised by the next poll): "
                                f"{callback_failed.__cause__!r}")
            raise failed from refused
        if self.member_epoch <= 0:
            raise self._commit_failed(offsets, refused, f"refused at member epoch {epoch}, and the member left")
        return answer

    async def _carry_out_after_commit(self, answer: pb.HeartbeatResponse) -> None:
        """Under the lock: the answer of the commit's heartbeat carried out, to its end even when
        ``commit()`` is cancelled meanwhile (half done, partitions would be owned with no reader).
        The commit's outcome is the commit's: a failure here (``on_revoke`` raising, the new
        partitions' offsets unreadable) goes where the loop's own heartbeat sends it. That
        hand-over runs inside the step carried to its end, so a ``commit()`` cancelled meanwhile
        still leaves the failure for the next poll, and raises its cancellation."""
        async def carry_out() -> None:
            try:
                if await self._carry_out(answer) == 0.0:
                    self._wake.set()  # a revocation to report: the loop heartbeats now
            except Exception as error:  # noqa: BLE001 - the membership's failure, not the commit's
                _log.info("group %s: carrying out the heartbeat answer after a commit failed: %r",
                          self.group_id, error)
                if not (getattr(error, "retriable", False) or getattr(error, "service_error", None) in _MEMBER_ERRORS):
                    self._error = error  # raised by the next poll, as the loop's heartbeat's would be
                self._wake.set()  # the loop's next heartbeat, now, takes the answer again (or rejoins)

        await _to_the_end(carry_out())

    async def _owned_positions(self) -> dict[TopicPartition, int]:
        return {TopicPartition(topic, partition): await self._readers[topic].position(partition)
                for topic, partition in sorted(self._owned)}

    async def _commit_locked(self, offsets: dict[TopicPartition, int] | None = None, *,
                             skip_deleted_topics: bool = False) -> None:
        """Commits ``offsets``, or every owned partition's position. The service refuses a
        commit naming a deleted topic as a whole; the member's own commits (positions of owned
        or revoked partitions: ``offsets`` None or ``skip_deleted_topics``) then commit topic by
        topic and leave the deleted topics out, a caller's explicit offsets raise."""
        assert self._transport is not None
        if offsets is None:
            skip_deleted_topics = True
            offsets = await self._owned_positions()
        if not offsets:
            return
        try:
            await self._send_commit(offsets)
        except TopicNotFoundError as error:
            if not skip_deleted_topics or not _is_deleted_topic(error):
                raise
            # The service checks the partitions before the member: this member may be unknown
            # to it too, and a topic's own commit then says so, which is raised, never skipped.
            for topic in sorted({tp.topic for tp in offsets}):
                try:
                    await self._send_commit({tp: offset for tp, offset in offsets.items() if tp.topic == topic})
                except TopicNotFoundError as refused:
                    if not _is_deleted_topic(refused):
                        raise

    async def _send_commit(self, offsets: dict[TopicPartition, int]) -> None:
        assert self._transport is not None
        await self._transport.commit_offsets(pb.CommitOffsetsRequest(
            group=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch, offsets=[
                pb.OffsetToCommit(topic=tp.topic, partition=tp.partition, offset=offset, leader_epoch=-1)
                for tp, offset in offsets.items()]))


async def _to_the_end(step: Awaitable[_T]) -> _T:
    """``step`` (a change of the member's partitions and readers) run to its end even when the
    caller is cancelled meanwhile; the cancellation is raised after it. The caller holds the
    lock until then, so nothing sees the change half made (Kafka runs these on its own
    background thread, never inside the application's call). A cancelled caller gets the
    cancellation whatever the step's outcome, its error (if any) as the cause: the caller asked
    to stop, and an error in its place would read as the step's failure, not the cancel.
    ``asyncio.wait`` only waits, never raises the step's error nor cancels it, so a
    ``CancelledError`` out of it is always the caller's own, even in the turn the step ends."""
    task = asyncio.ensure_future(step)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        error = None if task.cancelled() else task.exception()  # retrieved: not reported as lost
        raise asyncio.CancelledError from error
    return task.result()


def _is_deleted_topic(error: TopicNotFoundError) -> bool:
    """NOT_FOUND for a topic, not for the member: UnknownMemberError is NOT_FOUND too, and is the
    member's refusal (it must rejoin), never a deleted topic to leave out of a commit."""
    return error.service_error not in _MEMBER_ERRORS


def _names(partitions: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
