"""Group consumers: members of a consumer group that read the partitions the service assigns
them (KIP-848's shape: the service computes the assignment, the member only heartbeats) and
commit their positions to the group (docs/consumer-groups.md).

``AsyncGroupConsumer`` heartbeats in the background every interval the service asks for. Each
answer is the member's assignment: partitions it no longer gets are revoked (positions committed
when auto-commit is on, ``on_revoke`` called, reading stopped) and reported gone on the next
heartbeat, which is what lets the service hand them to another member (one whose records the latest
poll returned waits for the next poll: the application may still be processing them); auto-commit
commits the positions at the start of the latest poll, never records still being processed; new
partitions start at
the group's committed offset (``auto_offset_reset`` where it has none) after ``on_assign``.
Reading reuses one ``AsyncConsumer`` per topic over the owned partitions. Heartbeats and commits
take one lock, so a commit always carries the member epoch of the last answer.

The member id is the client's own (KIP-1082): a UUID made at construction, sent on the first join
and kept for the consumer's life, rejoins included. A join whose answer was lost (a timeout, a
dropped connection) is retried with the same id, which the service takes as the same member, so
no phantom member holds partitions until its session runs out.

A member whose heartbeats fail for the session timeout (the service's ``group_session_timeout_ms``,
told in every heartbeat answer; ``session_timeout_ms``, 45 s as Kafka's default, only until the
first answer or with a service that does not tell it) has been removed by the service, which may
have handed its partitions on: it revokes them itself (``on_revoke``, no commit, nothing more
delivered from them) and rejoins, with the same member id, once a heartbeat gets through.

``group_instance_id`` (Kafka's group.instance.id) makes the member static: every heartbeat names
it, and ``close()`` leaves with epoch -2, so the service keeps its partitions for the session
timeout and a restart with the same instance id (a new member id) takes them back.

The heartbeat and commit protocol with the coordinator lives in ``_group_protocol.py`` (the
consumer's base class); this module keeps the public surface, reading and the partitions' state.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

from seglog import _sync
from seglog._connection import ConnectionOptions, ServerList
from seglog._group_protocol import (
    _JOIN,
    _MEMBER_ERRORS,
    SESSION_TIMEOUT_MS_DEFAULT,
    CommitFailedError,
    GroupProtocol,
    RebalanceCallbackError,
    _names,
    _to_the_end,
)
from seglog._routing import CoordinatorTransport
from seglog.client import Transport
from seglog.consumer import AsyncConsumer, RawBatch, RecordBatchView
from seglog.errors import ClientClosedError, SeglogError, TopicNotFoundError
from seglog.structs import DEFAULT_SERVER, ConsumerRecord, OffsetAndTimestamp, TopicPartition
from seglog.v1 import log_service_pb2 as pb

__all__ = ["AsyncGroupConsumer", "CommitFailedError", "GroupConsumer", "NoOffsetForPartitionError",
           "RebalanceCallbackError"]

Callback = Callable[[list[TopicPartition]], Any]
# Kafka's OffsetCommitCallback.onComplete(offsets, exception): the exception is None on success.
CommitCallback = Callable[[dict[TopicPartition, int], BaseException | None], Any]
_T = TypeVar("_T")
# Kafka's CONSUMER_CLIENT_ID_SEQUENCE: the n of a default client id "consumer-<group>-<n>".
_CLIENT_SEQUENCE = itertools.count(1)
_IDLE_POLL_S = 0.02
_log = logging.getLogger("seglog.group_consumer")


class NoOffsetForPartitionError(SeglogError):
    """auto_offset_reset="none" and the group has no committed offset for a partition."""


class AsyncGroupConsumer(GroupProtocol):
    def __init__(
        self,
        server: ServerList = DEFAULT_SERVER,
        *,
        group_id: str,
        topics: Sequence[str],
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT,
        auto_offset_reset: Literal["earliest", "latest", "none"] = "latest",
        on_assign: Callback | None = None,
        on_revoke: Callback | None = None,
        group_instance_id: str | None = None,
        client_id: str | None = None,
        **options: Any,
    ) -> None:
        if not group_id:
            raise ValueError("group_id is required")
        if group_instance_id == "":
            raise ValueError("group_instance_id must not be empty (None: a dynamic member)")
        if not topics:
            raise ValueError("subscribe to at least one topic")
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {auto_offset_reset!r}")
        if auto_commit_interval_ms <= 0:
            raise ValueError(f"auto_commit_interval_ms must be > 0, got {auto_commit_interval_ms}")
        if session_timeout_ms <= 0:
            raise ValueError(f"session_timeout_ms must be > 0, got {session_timeout_ms}")
        # The session timeout the member keeps to: the service's once a heartbeat answer tells it.
        self.session_timeout_ms = session_timeout_ms
        self._last_heartbeat_ok = 0.0  # loop time the last answered heartbeat was sent at
        self.group_id = group_id
        self.group_instance_id = group_instance_id  # Kafka's group.instance.id: a static member
        # Kafka's client.id, its consumer's default "consumer-<group>-<n>" (n counts this process's
        # group consumers from 1): every heartbeat carries it, DescribeGroup shows it.
        self.client_id = client_id if client_id is not None else f"consumer-{group_id}-{next(_CLIENT_SEQUENCE)}"
        self._topics = list(dict.fromkeys(topics))
        self._auto_commit = enable_auto_commit
        self._auto_commit_s = auto_commit_interval_ms / 1000
        self._reset = auto_offset_reset
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self._server = server
        self._options = options  # the AsyncConsumer's own (connection, fetch sizes, mode)
        connection_keys = {"request_timeout_ms", "credentials", "channel_options", "tls", "tls_ca", "tls_cert",
                           "tls_key", "token"}
        self._connection = ConnectionOptions.resolve(server, **{k: v for k, v in options.items() if k in connection_keys})
        self._transport: Transport | None = None
        self.member_id = str(uuid.uuid4())  # the client's own, for the consumer's life (KIP-1082)
        self.member_epoch = _JOIN
        self._owned: set[tuple[str, int]] = set()
        self._readers: dict[str, AsyncConsumer] = {}
        self._lock: asyncio.Lock | None = None
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._turn = itertools.count()  # which owned topic a poll looks at first
        self._commit_tail: asyncio.Future[Any] | None = None  # the last commit_async, which the next follows
        # What auto-commit commits (Kafka's rule): each owned partition's position at the start of
        # the latest poll, past the records earlier polls returned, which the application finished
        # when it called poll again; never past records it may still be processing.
        self._consumed: dict[tuple[str, int], int] = {}
        # Partitions the service told this member to give up while records the latest poll returned
        # from them may still be processed: kept (and reported owned) until the next poll starts.
        self._revoking: set[tuple[str, int]] = set()
        self._wake = asyncio.Event()  # a poll completed a held revocation: heartbeat now to report it

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._transport is not None:
            return
        transport = self._open_transport()
        self._transport, self._lock = transport, asyncio.Lock()
        try:
            interval_s = await self._heartbeat()  # joined, with a first assignment, before start returns
        except BaseException:
            # A later start() retries the join, with the same member id: the same member.
            self._transport = None
            await transport.close()
            raise
        self._task = asyncio.create_task(self._run(interval_s), name=f"seglog-group-{self.group_id}")

    def _open_transport(self) -> Transport:
        """The consumer's channel to the service (a seam: tests wrap it to lose answers); its
        group RPCs go to the group's coordinator, wherever the bootstrap instance points."""
        return CoordinatorTransport(self._connection, self._connection.connect())  # type: ignore[return-value]

    async def __aenter__(self) -> AsyncGroupConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Commits (with auto-commit), revokes, leaves the group and closes, as Kafka's close:
        each step runs whatever the ones before it raised (a failed commit or a raising
        ``on_revoke`` still leaves, so the partitions move at once rather than a session timeout
        later), and the first error is raised at the end, the later ones logged and noted on it.
        Its commit is ``commit()``'s: refused at the epoch a lost heartbeat answer left stale, it
        heartbeats once and commits again at the epoch answered (``_commit_at_current_epoch``),
        but does not carry the answer out: the revocation below gives up every partition and the
        leave hands them all on, so starting readers for partitions just granted would be waste."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            if self._lock is not None:
                # A heartbeat in flight lands first: its answer may carry a new member epoch, the
                # one the commit and the leave below must be sent with.
                async with self._lock:
                    self._task.cancel()
            else:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._transport is None:
            return
        errors: list[Exception] = []
        await _guarded(errors, self._after_async_commits())
        assert self._lock is not None
        async with self._lock:
            try:
                if self._auto_commit and self.member_epoch > 0:
                    await _guarded(errors, self._commit_at_current_epoch(carry_out=False))
                await _guarded(errors, self._revoke(set(self._owned)))
                if self.member_id:
                    await _guarded(errors, self._leave())
            finally:
                for reader in self._readers.values():
                    await _guarded(errors, reader.close())
                self._readers.clear()
                await _guarded(errors, self._transport.close())
        if errors:
            first = errors[0]
            for later in errors[1:]:
                _log.warning("group %s: close: %r, after %r", self.group_id, later, first)
                first.add_note(f"close also failed: {later!r}")
            raise first

    # -- reading ---------------------------------------------------------------------------------
    async def poll(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records of the owned partitions, waiting up to ``timeout_ms`` for some."""
        return await self._poll(AsyncConsumer.poll, timeout_ms, max_records)

    async def poll_batches(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[RecordBatchView]:
        """``poll``, with one RecordBatchView (columns) per fetched batch (``AsyncConsumer.poll_batches``)."""
        return await self._poll(AsyncConsumer.poll_batches, timeout_ms, max_records)

    async def poll_raw(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[RawBatch]:
        """``poll``, with whole fetched batches as bytes (``AsyncConsumer.poll_raw``)."""
        return await self._poll(AsyncConsumer.poll_raw, timeout_ms, max_records)

    async def _poll(self, take: Callable[[AsyncConsumer, float | None, int | None], Any], timeout_ms: float | None,
                    max_records: int | None) -> list[_T]:
        """What ``take`` gives from the first owned topic that has something, the topics taken in
        turn from one call to the next (a busy topic does not starve the others)."""
        await self.start()
        self._check_open()
        assert self._lock is not None
        loop = asyncio.get_running_loop()
        deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        while True:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            async with self._lock:
                # Both may drop partitions and rebuild readers: carried to their end even when the
                # poll is cancelled meanwhile (half done, a partition would be owned with no reader).
                await _to_the_end(self._lapse_if_cut_off())
                await _to_the_end(self._mark_consumed())
                readers = list(self._readers.values())
                first = next(self._turn) % len(readers) if readers else 0
                for reader in readers[first:] + readers[:first]:
                    try:
                        taken: list[_T] = await take(reader, 0, max_records)
                    except TopicNotFoundError:
                        continue  # deleted: the next heartbeat's answer revokes its partitions
                    if taken:
                        return taken
            if deadline is not None and loop.time() >= deadline:
                return []
            await asyncio.sleep(_IDLE_POLL_S if deadline is None else max(0.0, min(_IDLE_POLL_S, deadline - loop.time())))

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self._owned)]

    async def position(self, topic: str, partition: int) -> int:
        return await self._reader(topic, partition).position(partition)

    async def seek(self, topic: str, partition: int, offset: int) -> None:
        await self._reader(topic, partition).seek(offset, partition)

    def highwater(self, topic: str, partition: int) -> int | None:
        return self._reader(topic, partition).highwater(partition)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for reader, numbers in self._by_reader(partitions):
            await reader.seek_to_beginning(*numbers)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        for reader, numbers in self._by_reader(partitions):
            await reader.seek_to_end(*numbers)

    async def seek_to_timestamp(self, timestamp_ms: int, *partitions: TopicPartition) -> None:
        for reader, numbers in self._by_reader(partitions):
            await reader.seek_to_timestamp(timestamp_ms, *numbers)

    async def beginning_offsets(self) -> dict[TopicPartition, int]:
        return {TopicPartition(topic, p): offset for topic, reader in sorted(self._readers.items())
                for p, offset in (await reader.beginning_offsets()).items()}

    async def end_offsets(self) -> dict[TopicPartition, int]:
        return {TopicPartition(topic, p): offset for topic, reader in sorted(self._readers.items())
                for p, offset in (await reader.end_offsets()).items()}

    async def offsets_for_times(self, timestamp_ms: int) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return {TopicPartition(topic, p): hit for topic, reader in sorted(self._readers.items())
                for p, hit in (await reader.offsets_for_times(timestamp_ms)).items()}

    def _reader(self, topic: str, partition: int) -> AsyncConsumer:
        reader = self._readers.get(topic)
        if reader is None or (topic, partition) not in self._owned:
            raise ValueError(f"{topic}-{partition} is not assigned to this member (it owns {self.assignment()})")
        return reader

    def _by_reader(self, partitions: Sequence[TopicPartition]) -> list[tuple[AsyncConsumer, list[int]]]:
        """The owned ``partitions`` (every owned one when none is named), per topic's reader."""
        named = [(tp.topic, tp.partition) for tp in partitions] or sorted(self._owned)
        for topic, partition in named:
            self._reader(topic, partition)  # refuses one not owned, before any moves
        return [(self._readers[topic], [p for t, p in named if t == topic]) for topic in sorted({t for t, _ in named})]

    # -- offsets ---------------------------------------------------------------------------------
    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commits ``offsets`` (the next offset to read, per partition), or every owned
        partition's position, after every ``commit_async`` made before it (Kafka's commitSync).
        ``offsets`` may name only partitions this member owns (``CommitFailedError`` otherwise,
        nothing sent). Refused at a member epoch a lost heartbeat answer left stale, it heartbeats
        once and commits the same offsets again at the epoch answered; fenced for real or the
        heartbeat unanswered, it raises ``CommitFailedError`` (``_commit_at_current_epoch``)."""
        self._check_open()
        await self.start()
        await self._after_async_commits()
        assert self._lock is not None
        async with self._lock:
            await self._commit_at_current_epoch(offsets)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: CommitCallback | None = None) -> asyncio.Future[dict[TopicPartition, int]]:
        """Commits ``offsets``, or the owned partitions' positions as they are at this call, in
        the background (Kafka's commitAsync): returns a future of the offsets committed, failed
        with the commit's error. Commits go out one at a time, in call order, so a later one never
        lands under an earlier one. ``callback(offsets, error)`` (``error`` None on success) is
        called when it ends; a failed commit nobody awaits nor calls back for is logged by asyncio
        ("exception was never retrieved"). Positions of partitions revoked before it goes out are
        left out (their revocation committed them)."""
        self._check_open()
        own = offsets is None
        snapshot = self._positions_now() if offsets is None else dict(offsets)
        task = asyncio.get_running_loop().create_task(self._commit_in_turn(self._commit_tail, snapshot, own))
        self._commit_tail = task
        if callback is not None:
            task.add_done_callback(lambda done: _call_back(callback, snapshot, done))
        return task

    async def _commit_in_turn(self, previous: asyncio.Future[Any] | None, offsets: dict[TopicPartition, int],
                              own: bool) -> dict[TopicPartition, int]:
        if previous is not None:
            await asyncio.wait([previous])  # its outcome belongs to its own future
        await self.start()
        assert self._lock is not None
        async with self._lock:
            if own:
                offsets = {tp: o for tp, o in offsets.items() if (tp.topic, tp.partition) in self._owned}
            await self._commit_locked(offsets, skip_deleted_topics=own)
        return offsets

    async def _after_async_commits(self) -> None:
        if self._commit_tail is not None:
            await asyncio.wait([self._commit_tail])

    def _positions_now(self) -> dict[TopicPartition, int]:
        """The owned partitions' positions as known now, without a call (one whose start is not
        resolved yet has consumed nothing, so it has nothing to commit)."""
        positions = {}
        for topic, partition in sorted(self._owned):
            position = self._readers[topic]._position_now(partition)
            if position is not None:
                positions[TopicPartition(topic, partition)] = position
        return positions

    async def _mark_consumed(self) -> None:
        """Under the lock, as a poll starts (nothing taken by it yet): the records earlier polls
        returned are processed, so the positions now are consumed, and revocations held for them
        complete (their positions committed with auto-commit, ``on_revoke`` called)."""
        self._consumed = {(tp.topic, tp.partition): offset for tp, offset in self._positions_now().items()}
        if self._revoking:
            held, self._revoking = self._revoking, set()
            await self._commit_and_revoke(held)
            self._wake.set()

    def _held_by_the_application(self, partitions: set[tuple[str, int]]) -> set[tuple[str, int]]:
        """Of ``partitions``, those the latest poll returned records from (position past consumed)."""
        held = set()
        for topic, partition in partitions:
            position = self._readers[topic]._position_now(partition)
            if position is not None and position != self._consumed.get((topic, partition), position):
                held.add((topic, partition))
        return held

    async def _commit_and_revoke(self, revoked: set[tuple[str, int]]) -> bool:
        """Under the lock: gives ``revoked`` up, their consumed positions committed first with
        auto-commit (``_commit_before_revoking``: at a stale epoch, retried at the current one).
        That commit refused the member (unknown, or fenced for real: its heartbeat refused too,
        and it has given everything up) is logged and the revocation goes on uncommitted, as
        Kafka's consumer proceeds with a revocation whose auto-commit failed; the loop heartbeats
        at once, so the member rejoins. The records consumed since the partitions' last commit
        are read again by their next owner (at least once). Returns False then (the member must
        rejoin), True when the partitions were given up committed. Any other failure is raised,
        the partitions kept, and the next answer revokes them again."""
        if self._auto_commit:
            try:
                await self._commit_before_revoking(self._consumed_of(revoked))
            except SeglogError as error:
                if error.service_error not in _MEMBER_ERRORS:
                    raise
                _log.warning("group %s: the auto-commit before giving up %s was refused (%s: %s); giving them "
                             "up uncommitted and heartbeating now", self.group_id,
                             _names(sorted(TopicPartition(t, p) for t, p in revoked)), error.service_error, error)
                self._wake.set()
                await self._revoke(revoked & self._owned)  # fenced for real: all given up already
                return False
        await self._revoke(revoked)
        return True

    def _consumed_of(self, partitions: set[tuple[str, int]]) -> dict[TopicPartition, int]:
        return {TopicPartition(t, p): self._consumed[t, p] for t, p in sorted(partitions) if (t, p) in self._consumed}

    async def _auto_commit_consumed(self) -> None:
        """The timer's auto-commit: the consumed positions, after every ``commit_async`` before it."""
        await self._after_async_commits()
        assert self._lock is not None
        async with self._lock:
            await self._commit_locked(self._consumed_of(self._owned), skip_deleted_topics=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")

    async def committed(self, partitions: Sequence[TopicPartition] | None = None) -> dict[TopicPartition, int | None]:
        await self.start()
        assert self._transport is not None
        wanted = list(partitions) if partitions is not None else self.assignment()
        response = await self._transport.fetch_offsets(pb.FetchOffsetsRequest(group=self.group_id, partitions=[
            pb.GroupPartition(topic=tp.topic, partition=tp.partition) for tp in wanted]))
        return {TopicPartition(o.topic, o.partition): (o.offset if o.offset >= 0 else None) for o in response.offsets}

    # -- partitions given and taken (heartbeats and commits: _group_protocol.py) -----------------
    async def _carry_out(self, answer: pb.HeartbeatResponse) -> float:
        """Under the lock: what a heartbeat answer asks (partitions revoked, then assigned);
        returns the wait before the next heartbeat (0 when a revocation must be reported now, or
        when its commit refused the member, which then takes none of the partitions granted)."""
        assignment = {(a.topic, a.partition) for a in answer.assignment}
        revoked, added = self._owned - assignment, assignment - self._owned
        # Partitions with records the application may still process wait for its next poll.
        self._revoking = self._held_by_the_application(revoked)
        revoked_now = revoked - self._revoking
        if revoked_now and not await self._commit_and_revoke(revoked_now):
            return 0.0  # the member was refused: it rejoins now, taking none of this answer's partitions
        if added:
            await self._assign(added)
        return 0.0 if revoked_now else answer.heartbeat_interval_ms / 1000

    async def _revoke(self, revoked: set[tuple[str, int]]) -> None:
        self._call_on_revoke(revoked)
        await self._drop(revoked)

    def _call_on_revoke(self, revoked: set[tuple[str, int]]) -> None:
        if revoked and self._on_revoke is not None:
            self._on_revoke([TopicPartition(t, p) for t, p in sorted(revoked)])

    async def _drop(self, revoked: set[tuple[str, int]]) -> None:
        """Under the lock: ``revoked`` no longer owned nor read (``on_revoke`` called before)."""
        if not revoked:
            return
        self._owned -= revoked
        self._revoking -= revoked
        for gone in revoked:
            self._consumed.pop(gone, None)
        await self._rebuild({t for t, _ in revoked})

    async def _assign(self, added: set[tuple[str, int]]) -> None:
        assert self._transport is not None
        response = await self._transport.fetch_offsets(pb.FetchOffsetsRequest(group=self.group_id, partitions=[
            pb.GroupPartition(topic=t, partition=p) for t, p in sorted(added)]))
        starts: dict[tuple[str, int], int | str] = {}
        for offset in response.offsets:
            if offset.offset >= 0:
                starts[offset.topic, offset.partition] = offset.offset
            elif self._reset == "none":
                self._error = NoOffsetForPartitionError(
                    f"group {self.group_id!r} has no committed offset for {offset.topic}-{offset.partition} and "
                    "auto_offset_reset is 'none'")
            else:
                starts[offset.topic, offset.partition] = self._reset
        if self._on_assign is not None:
            self._on_assign([TopicPartition(t, p) for t, p in sorted(added)])
        self._owned |= set(starts)
        await self._rebuild({t for t, _ in starts}, starts)

    async def _rebuild(self, topics: set[str], starts: dict[tuple[str, int], int | str] | None = None) -> None:
        """One reader per topic over the owned partitions: kept partitions resume at their
        position, new ones at ``starts``."""
        starts = dict(starts or {})
        for topic in topics:
            old = self._readers.pop(topic, None)
            if old is not None:
                for partition in sorted(p for t, p in self._owned if t == topic and (t, p) not in starts):
                    starts[topic, partition] = await old.position(partition)
                await old.close()
            partitions = sorted(p for t, p in self._owned if t == topic)
            if not partitions:
                continue
            reader = AsyncConsumer(self._server, topic, partitions, start="latest",
                                   auto_offset_reset=self._reset, **self._options)
            await reader.start()
            for partition in partitions:
                await reader.seek(starts[topic, partition], partition)  # type: ignore[arg-type]
            self._readers[topic] = reader


async def _guarded(errors: list[Exception], step: Awaitable[Any]) -> None:
    """Awaits one step of a close; its error is added to ``errors``, never raised, so the steps
    after it still run."""
    try:
        await step
    except Exception as error:  # noqa: BLE001 - raised by close once every step ran
        errors.append(error)


def _call_back(callback: CommitCallback, offsets: dict[TopicPartition, int],
               done: asyncio.Future[dict[TopicPartition, int]]) -> None:
    if done.cancelled():
        callback(offsets, asyncio.CancelledError("the commit was cancelled"))
    elif done.exception() is not None:
        callback(offsets, done.exception())
    else:
        callback(done.result(), None)


class GroupConsumer(_sync.SyncFacade, implementation=AsyncGroupConsumer):
    """The synchronous group consumer: the same options and methods as ``AsyncGroupConsumer``
    (callbacks run on the client's loop thread). ``Consumer(server, group_id=..., topics=[...])``
    is the same member behind the one consumer class."""

    def poll(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        return self._portal.run(self._async.poll(timeout_ms, max_records))

    def poll_batches(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[RecordBatchView]:
        return self._portal.run(self._async.poll_batches(timeout_ms, max_records))

    def poll_raw(self, timeout_ms: float | None = 0, max_records: int | None = None) -> list[RawBatch]:
        return self._portal.run(self._async.poll_raw(timeout_ms, max_records))

    def assignment(self) -> list[TopicPartition]:
        return self._async.assignment()

    def position(self, topic: str, partition: int) -> int:
        return self._portal.run(self._async.position(topic, partition))

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._portal.run(self._async.seek(topic, partition, offset))

    def highwater(self, topic: str, partition: int) -> int | None:
        return self._async.highwater(topic, partition)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._portal.run(self._async.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._portal.run(self._async.seek_to_end(*partitions))

    def seek_to_timestamp(self, timestamp_ms: int, *partitions: TopicPartition) -> None:
        self._portal.run(self._async.seek_to_timestamp(timestamp_ms, *partitions))

    def beginning_offsets(self) -> dict[TopicPartition, int]:
        return self._portal.run(self._async.beginning_offsets())

    def end_offsets(self) -> dict[TopicPartition, int]:
        return self._portal.run(self._async.end_offsets())

    def offsets_for_times(self, timestamp_ms: int) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._portal.run(self._async.offsets_for_times(timestamp_ms))

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        self._portal.run(self._async.commit(offsets))

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: CommitCallback | None = None) -> concurrent.futures.Future[dict[TopicPartition, int]]:
        """``AsyncGroupConsumer.commit_async``, its future a concurrent one; ``callback`` runs on
        the client's loop thread (it may not call this consumer's blocking methods)."""
        return self._portal.submit(lambda: self._async.commit_async(offsets, callback))

    def committed(self, partitions: Sequence[TopicPartition] | None = None) -> dict[TopicPartition, int | None]:
        return self._portal.run(self._async.committed(partitions))

    def close(self) -> None:
        self._close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
