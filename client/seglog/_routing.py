"""Routing: which channel a partition's requests go to, and following the owner when it moves.

In cluster mode (docs/cluster.md) a partition lives on one instance; another instance refuses it
FAILED_PRECONDITION with the owner in trailing metadata (``NotPartitionOwnerError``), never
forwarding. Kafka's clients keep a metadata cache and a connection per broker; so does the
``Router`` of a Producer or Consumer:

- ``transport_for(topic, partition)``: the owner's channel where the owner is known, else the
  bootstrap channel. Until the first refusal nothing is known and nothing is asked: a single
  process (no cluster) costs no Metadata call and no extra lookup beyond one empty-dict test.
- ``follow(topic, partition, error, used)`` after a refusal: the hinted owner is routed at once
  and ``ClusterService.Metadata`` is asked (once for all the partitions refused together), so the
  other partitions of the cluster are routed right from then on. An ``OwnerUnavailableError`` or
  a routed owner that no longer answers (UNAVAILABLE, or no answer within the request timeout: a
  paused or partitioned owner, as Kafka's client refreshes metadata on a request timeout) refreshes
  the metadata too. True when the partition now routes elsewhere: the caller repeats its request
  once there. Routes carry the partition's ownership epoch (Kafka's clients keep leader epochs
  so): a hint older than the route held is stale and not taken (a move's lagging target naming
  the old owner), and a Metadata answer older than the hint just taken does not undo it (an
  answering instance whose watch lags), so a move is followed straight to its target.
- ``MoveFollower`` (a reader's, per request stream): a move's refusals followed past the first.
  The old owner refuses the moment its own etcd watch sees the move's commit; nothing waits for
  the target's, nor for the instance that answers Metadata. So the target may still refuse naming
  the old owner, or the metadata route back to the old owner, for a few milliseconds: a refusal
  naming an owner met again before any answer is tried again after a short back-off (5 ms,
  doubling, at most 250 ms a wait), the hint and the metadata taken afresh each time, until the
  connection's request timeout has passed since the first such retry; only then is it raised.

The same holds for every request naming a partition (docs/cluster.md): ``at_owner`` sends one at
the partition's owner and repeats it once where a refusal points (DeleteRecords, ExplainLookup);
``offsets_for_times`` splits OffsetsForTimes by owner, and repeats once at its owner each target
whose answer carries the owner's hint (the service answers those per target, as Kafka answers
ListOffsets per partition), the answers in the request's order. Admin and the Consumer's start
positions (``latest``, a timestamp) go through them, so neither reads another instance's empty copy.

Consumer groups follow their coordinator the same way: ``at_coordinator(group, send)`` sends a
group RPC to the instance a refusal's owner hint named for that group (the owner of the group's
``__consumer_offsets`` partition), repeating once there; ``instances()`` lists a channel per live
instance for ListGroups, which Kafka's admin asks of every broker and merges.

Metadata is fetched lazily, only after such a refusal, whatever the length of the bootstrap list
(a bootstrap list only says where to start). One channel per owner address, opened on first use
with the client's connection settings and closed with the client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from seglog._connection import ConnectionOptions
from seglog.client import Transport
from seglog.errors import (
    NotPartitionOwnerError,
    OwnerUnavailableError,
    RequestTimeoutError,
    SeglogError,
    ServiceError,
    ServiceOverloadedError,
    ServiceUnavailableError,
)
from seglog.structs import ClusterInstance, ClusterMetadata, PartitionOwner, TopicPartition
from seglog.v1 import cluster_pb2 as cluster_pb
from seglog.v1 import log_service_pb2 as pb

__all__ = ["FOLLOWED_ERRORS", "HINTED", "CoordinatorTransport", "MoveFollower", "PackedLookupsUnsupported",
           "Router", "RouterStatistics", "any_hinted", "metadata_from"]

# The errors after which a request naming a partition (or a group) asks where it lives now: a
# refusal naming the owner, and a routed owner that is down or does not answer in time.
FOLLOWED_ERRORS = (NotPartitionOwnerError, ServiceUnavailableError, RequestTimeoutError)

_T = TypeVar("_T")
# A group call's sends at most: a routed coordinator that is gone, the bootstrap instance, and the
# coordinator that one names.
_COORDINATOR_ATTEMPTS = 3
# A move's refusals met again before an answer (MoveFollower): the first wait, and the longest.
_REFOLLOW_FIRST_S = 0.005
_REFOLLOW_MAX_S = 0.25


class MoveFollower:
    """One reader's following of its partition's owner (a Consume stream, a Fetch): the first
    refusal is followed at once as ``Router.follow`` says; a refusal naming an owner met again
    before an answer (the move's target or the metadata not caught up yet) waits a back-off,
    learns the hint and the metadata afresh and is tried again, within the connection's request
    timeout counted from the first such wait. ``answered()`` after each answer: a later refusal is
    a later move."""

    def __init__(self, router: Router, topic: str, partition: int) -> None:
        self._router = router
        self._topic = topic
        self._partition = partition
        self._followed = False
        self._delay_s = _REFOLLOW_FIRST_S
        self._deadline: float | None = None
        self.retries = 0  # tries again after a wait, since the last answer

    def answered(self) -> None:
        if self._followed:
            self._followed = False
            self._delay_s = _REFOLLOW_FIRST_S
            self._deadline = None
            self.retries = 0

    async def follow(self, error: SeglogError, used: Transport) -> bool:
        """True when the caller repeats its request (where ``transport_for`` routes now); False:
        raise ``error``."""
        first = not self._followed
        self._followed = True
        if first and await self._router.follow(self._topic, self._partition, error, used):
            return True
        if not isinstance(error, NotPartitionOwnerError):
            return False  # an owner gone or silent is followed once, as before
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._deadline is None:
            self._deadline = now + self._router.request_timeout_s
        if now >= self._deadline:
            return False
        await asyncio.sleep(min(self._delay_s, self._deadline - now))
        self._delay_s = min(self._delay_s * 2, _REFOLLOW_MAX_S)
        self.retries += 1
        await self._router.follow(self._topic, self._partition, error, used)  # the hint, the metadata afresh
        return True


@dataclass(frozen=True)
class RouterStatistics:
    metadata_refreshes: int
    metadata_failures: int
    redirects: int  # requests repeated at another owner after a refusal
    owner_channels: int  # channels open besides the bootstrap one


class Router:
    """The bootstrap channel, one channel per partition owner, and the owners' map."""

    def __init__(self, connection: ConnectionOptions, bootstrap: Transport) -> None:
        self._connection = connection
        self.bootstrap = bootstrap
        # Owner address per partition, from Metadata or a refusal's hint. Empty until the first
        # refusal (and in a single process for good): every request takes the bootstrap channel.
        self._routes: dict[TopicPartition, str] = {}
        # The ownership epoch of each route held (etcd's, from Metadata or a refusal's hint): a
        # hint older than the route is stale, and a Metadata answer older than the hint just
        # taken does not undo it (``follow``).
        self._epochs: dict[TopicPartition, int] = {}
        # Since when (``_clock``) an owner older than the route held has been named for a
        # partition: its first naming (a hint refused as stale, a current Metadata answer kept
        # from replacing the route) since the route held was last confirmed, that is an owner
        # at the held epoch or newer named, or a request of the partition answered with success
        # on the route (``confirm``). Once the disagreement is older than the request timeout
        # the older owner is taken (``_older_taken``): epochs restart at 0 when a topic is
        # created again, and nothing here tells one incarnation of a topic from the next, so a
        # route held from a deleted topic is never pinned for ever, however rarely it is sent to.
        self._older_since: dict[TopicPartition, float] = {}
        self._clock: Callable[[], float] = time.monotonic
        self._owners: dict[str, Transport] = {}
        # Each consumer group's coordinator address, from refusals' owner hints (at_coordinator).
        self._coordinators: dict[str, str] = {}
        self._refresh_lock: asyncio.Lock | None = None
        self._generation = 0  # Metadata answers applied
        self.metadata: ClusterMetadata | None = None
        self._refreshes = 0
        self._failures = 0
        self.redirects = 0
        # False once a service answered a packed OffsetsForTimes without its ``packed`` answers
        # (a build from before them): the caller asks in the old form from then on.
        self.packed_lookups = True

    @property
    def request_timeout_s(self) -> float:
        return self._connection.request_timeout_ms / 1000

    def transport_for(self, topic: str, partition: int) -> Transport:
        if not self._routes:
            return self.bootstrap
        address = self._routes.get(TopicPartition(topic, partition))
        if address is None or address == self.bootstrap.server:
            return self.bootstrap
        return self._channel_to(address)

    async def follow(self, topic: str, partition: int, error: SeglogError, used: Transport) -> bool:
        """After ``error`` from ``used`` for this partition: learn where it lives now. True when
        it routes to another channel, where the caller repeats the request once."""
        if not _worth_following(error, used is not self.bootstrap):
            return False
        seen = self._generation
        tp = TopicPartition(topic, partition)
        hint = self._take_hint(tp, error)
        await self.refresh(seen)
        if hint is not None:
            self._hold_hint(tp, *hint)
        moved = self.transport_for(topic, partition) is not used
        self.redirects += moved
        return moved

    def _take_hint(self, tp: TopicPartition, error: SeglogError) -> tuple[str, int] | None:
        """Routes ``tp`` where a refusal's hint names its owner, unless the hint is older than
        the route held (its epoch below the route's: the refusing instance has not seen the move
        the route came from, as a move's target whose watch lags names the old owner). Returns
        the hint taken (address, epoch), or None."""
        owner_address = getattr(error, "owner_address", None)
        if not isinstance(error, NotPartitionOwnerError) or not owner_address:
            return None
        epoch = error.epoch
        if epoch is None:  # a hint without its epoch (never sent by this service): taken as is
            self._routes[tp] = owner_address
            self._epochs.pop(tp, None)
            return None
        if epoch < self._epochs.get(tp, -1) and not self._older_taken(tp):
            return None  # stale: the route held is newer
        self._routes[tp] = owner_address
        self._epochs[tp] = epoch
        self._older_since.pop(tp, None)
        return owner_address, epoch

    def _older_taken(self, tp: TopicPartition) -> bool:
        """An owner older than the route held is named for ``tp``: True when the first such
        naming since the route was last confirmed is a request timeout old or older (the topic
        was likely deleted and created again, its epochs started over), so the caller takes it
        (the naming in between need not be close together: a producer that sends rarely names
        it a send apart). Else False, and the route held stands: a move's target or a Metadata
        instance that lags names the previous owner for a moment, until its watch catches up."""
        now = self._clock()
        since = self._older_since.setdefault(tp, now)
        if now - since < self.request_timeout_s:
            return False
        del self._older_since[tp]
        return True

    def route_epoch(self, topic: str, partition: int) -> int:
        """The ownership epoch of the partition's route held; -1 where none is known."""
        return self._epochs.get(TopicPartition(topic, partition), -1)

    def confirm(self, topic: str, partition: int, answered: Transport) -> None:
        """A request of the partition was answered with success on ``answered``: where that is
        still the route held, the route is right after all, and an older owner named before it
        no longer counts (the next one is a new disagreement, given the request timeout afresh).
        A success from a route given up while the request was in flight (another request followed
        a newer hint) says nothing of the route held now, and leaves its disagreement's age as it
        is. One dict check while none is."""
        if self._older_since and answered is self.transport_for(topic, partition):
            self._older_since.pop(TopicPartition(topic, partition), None)

    def _hold_hint(self, tp: TopicPartition, address: str, epoch: int) -> None:
        """After a Metadata answer: the hint just taken stands where the answer is older (its
        epoch for ``tp`` below the hint's, or no record of it: the answering instance's watch
        has not seen the move the refusal named), so the request goes to the new owner at once
        rather than back to the old one until the answering instance catches up."""
        if self._epochs.get(tp, -1) < epoch:
            self._routes[tp] = address
            self._epochs[tp] = epoch
            self._older_since.pop(tp, None)

    async def at_owner(self, topic: str, partition: int, send: Callable[[Transport], Awaitable[_T]]) -> _T:
        """``send(transport)`` at the partition's owner; refused naming another owner (or by a
        routed owner that no longer answers), repeated once where the refusal points."""
        for attempt in range(2):
            transport = self.transport_for(topic, partition)
            try:
                answer = await send(transport)
            except FOLLOWED_ERRORS as error:
                if attempt or not await self.follow(topic, partition, error, transport):
                    raise
            else:
                self.confirm(topic, partition, transport)
                return answer
        raise AssertionError("unreachable: the second attempt returns or raises")  # pragma: no cover

    async def at_coordinator(self, group: str, send: Callable[[Transport], Awaitable[_T]]) -> _T:
        """``send(transport)`` at the group's coordinator (the owner of its offsets partition in
        cluster mode): Heartbeat, CommitOffsets, FetchOffsets, DescribeGroup, DeleteGroup. The
        coordinator's address is learnt from a refusal's owner hint (no Metadata call: the
        offsets topic is internal) and kept per group; a refusal naming another coordinator is
        repeated once there, and a routed coordinator that no longer answers (UNAVAILABLE) is
        forgotten and the request repeated at the bootstrap instance, which names the current one
        (at most three sends: the dead route, the bootstrap, the coordinator it names). A single
        process never refuses: one dict look-up per call."""
        for attempt in range(_COORDINATOR_ATTEMPTS):
            address = self._coordinators.get(group)
            transport = self.bootstrap if address is None else self._channel_to(address)
            try:
                return await send(transport)
            except FOLLOWED_ERRORS as error:
                # The hint is learnt even on the last attempt: the caller's retry goes there.
                if not self._follow_coordinator(group, error, transport) or attempt == _COORDINATOR_ATTEMPTS - 1:
                    raise
                self.redirects += 1
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def _follow_coordinator(self, group: str, error: SeglogError, used: Transport) -> bool:
        """Learns the group's coordinator from ``error``; True when the next try goes elsewhere."""
        owner_address = getattr(error, "owner_address", None)
        if isinstance(error, NotPartitionOwnerError) and owner_address:
            self._coordinators[group] = owner_address
            return self._channel_to(owner_address) is not used
        if used is not self.bootstrap and _worth_following(error, routed=True):
            self._coordinators.pop(group, None)  # gone or moved: the bootstrap instance knows where
            return True
        return False

    def _channel_to(self, address: str) -> Transport:
        if address == self.bootstrap.server:
            return self.bootstrap
        transport = self._owners.get(address)
        if transport is None:
            transport = self._owners[address] = self._connection.connect_to(address)
        return transport

    async def instances(self) -> list[Transport]:
        """A channel to every live instance of the cluster (Metadata asked once), or the
        bootstrap channel alone for a single process: for calls Kafka's admin sends to every
        broker (ListGroups)."""
        metadata = await self.refresh()  # afresh: an instance may have joined since
        if metadata is None or not metadata.cluster_mode:
            return [self.bootstrap]
        return [self._channel_to(i.address) for i in metadata.instances if i.alive and i.address]

    async def offsets_for_times(self, request: pb.OffsetsForTimesRequest, read: Callable[[Any, bool], Any] | None = None,
                                message: Any = None) -> Any:
        """OffsetsForTimes at each target's owner, answers in the request's order. The targets
        go to their owners' channels together (one request per owner); a target answered with
        an owner hint (its error's ``owner_id``) is routed there, Metadata refreshed once, and
        asked once more at its owner; an owner's channel that no longer answers refreshes too.
        A target still refused keeps its error (the caller raises it, naming the partition);
        targets whose owner's channel no longer answers and that still route there after the
        refresh (a gone owner the cluster still names) fail the call with that channel's error.

        Every target on one channel (always so in a single process): the request goes there as
        it is, awaited in this task, and its answer is returned as it is when no target needs
        asking elsewhere: no task, no gather, no copy of the request or of the answer (on a
        single lookup those cost about as much as the stream's round trip). What follows a
        refusal is the same either way.

        ``read(results, last)``, when given, reads the answers (returning what this returns
        instead of the answer): on the first answer (``last`` False) it returns ``HINTED`` when
        any carries an owner hint, so the answers are walked once, not once for the hints and
        once more by the caller.

        A request in the packed form (``packed``, not ``partitions``: one entry per partition's
        targets) is routed by entry the same way, ``read`` given ``response.packed``; an answer
        without its ``packed`` entries (a service from before them) raises
        ``PackedLookupsUnsupported``, ``packed_lookups`` set False: ask again in the old form.

        ``message``: a LookupStreamRequest whose ``offsets_for_times`` is ``request``, sent as it
        is to the sole owner (``Transport.offsets_for_times``: no message built and copied)."""
        packed = bool(request.packed)
        items = request.packed if packed else request.partitions
        sole = self._sole_transport(items) if self._routes else self.bootstrap  # (a single process: no routes)
        if sole is None:
            response = await self._ask_owners(list(items), 0, None, None, packed=packed)
            return response if read is None else read(_answers(response, packed), True)
        seen = self._generation
        count = len(items)
        try:
            response = await sole.offsets_for_times(request, message)
            if packed:
                self._check_packed(response, count)
        except (ServiceUnavailableError, RequestTimeoutError) as error:
            if not _worth_following(error, sole is not self.bootstrap):
                raise
            results: list[pb.PartitionOffset | None] = [None] * count
            refused = list(range(count))
            failures: dict[int, SeglogError] = dict.fromkeys(refused, error)
        else:
            answers = response.packed if packed else response.results  # (_answers, inline)
            if self._older_since:  # (one dict check while no disagreement is open)
                self._confirm_answered(answers, sole)
            if read is not None:
                found = read(answers, False)
                if found is not HINTED:
                    return found
            elif not any(_hint_of(answer) is not None for answer in answers):
                return response
            results = [None] * count
            refused = self._note_answers(range(count), answers, results, last=False)
            failures = {}
        targets = list(items)
        pending = await self._after_refusal(targets, refused, dict.fromkeys(refused, sole), seen, results)
        response = await self._ask_owners(targets, 1, results, pending, failures, packed=packed)
        return response if read is None else read(_answers(response, packed), True)

    def _check_packed(self, response: pb.OffsetsForTimesResponse, count: int) -> None:
        """Raises ``PackedLookupsUnsupported`` for an answer to ``count`` packed entries that
        has none (a service from before them ignored the request's ``packed``)."""
        if len(response.packed) != count:
            if not response.packed:
                self.packed_lookups = False
                raise PackedLookupsUnsupported("the service answers OffsetsForTimes in the old form only")
            raise ServiceError(f"OffsetsForTimes answered {len(response.packed)} entries for {count}")

    def _sole_transport(self, targets: Any) -> Transport | None:
        """The channel every target routes to; None when they route to more than one."""
        if not self._routes:
            return self.bootstrap
        if len(targets) == 1:  # a single lookup: its partition's route, no set
            target = targets[0]
            return self.transport_for(target.topic, target.partition)
        sole = None
        asked: set[tuple[str, int]] = set()
        for target in targets:
            key = (target.topic, target.partition)
            if key in asked:
                continue  # a partition's targets route together: its route looked up once
            asked.add(key)
            transport = self.transport_for(*key)
            if sole is None:
                sole = transport
            elif transport is not sole:
                return None
        return sole

    async def _ask_owners(self, targets: list[Any], first_attempt: int,
                          results: list[Any] | None, pending: list[int] | None,
                          failures: dict[int, SeglogError] | None = None, *,
                          packed: bool = False) -> pb.OffsetsForTimesResponse:
        """``targets[n]`` for each of ``pending`` (every one when None) at its owner, one request
        per owner in parallel, from attempt ``first_attempt`` (of two) on; into ``results``.
        ``failures``: the error of each target whose owner's channel did not answer; one left
        without an answer in the end fails the call with it. ``packed``: ``targets`` are the
        packed form's entries (PartitionTimestamps), answered in ``packed``."""
        if results is None or pending is None:
            results, pending = [None] * len(targets), list(range(len(targets)))
        failures = {} if failures is None else failures
        for attempt in range(first_attempt, 2):
            if not pending:
                break
            asked_on = {n: self.transport_for(targets[n].topic, targets[n].partition) for n in pending}
            by_transport: dict[int, tuple[Transport, list[int]]] = {}
            for number, transport in asked_on.items():
                by_transport.setdefault(id(transport), (transport, []))[1].append(number)
            seen = self._generation
            retry = await asyncio.gather(*(
                self._lookup_at(transport, targets, numbers, results, failures, last=attempt == 1, packed=packed)
                for transport, numbers in by_transport.values()))
            refused = [number for numbers in retry for number in numbers]
            if not refused:
                break
            pending = await self._after_refusal(targets, refused, asked_on, seen, results)
        unanswered = next((n for n, result in enumerate(results) if result is None), None)
        if unanswered is not None:  # its owner did not answer, and the cluster names no other
            raise failures[unanswered]
        response = pb.OffsetsForTimesResponse()
        answers = _answers(response, packed)
        answers.extend(r for r in results if r is not None)
        assert len(answers) == len(targets), "every target answered or refused"
        return response

    async def _after_refusal(self, targets: list[Any], refused: list[int],
                             asked_on: dict[int, Transport], seen: int,
                             results: list[Any] | None = None) -> list[int]:
        """Metadata refreshed (unless refreshed since generation ``seen``); the ``refused``
        numbers whose target now routes elsewhere than where it was asked."""
        await self.refresh(seen)
        if results is not None:  # the hints just taken stand over an older Metadata answer
            for number in refused:
                error = None if results[number] is None else _hint_of(results[number])
                if error is not None and error.owner_address and \
                        error.error_class == NotPartitionOwnerError.__name__:
                    target = targets[number]
                    self._hold_hint(TopicPartition(target.topic, target.partition), error.owner_address,
                                    error.owner_epoch)
        pending = [n for n in refused if self.transport_for(targets[n].topic, targets[n].partition)
                   is not asked_on[n]]
        self.redirects += len(pending)
        return pending

    async def _lookup_at(self, transport: Transport, targets: list[Any], numbers: list[int],
                         results: list[Any], failures: dict[int, SeglogError], *,
                         last: bool, packed: bool = False) -> list[int]:
        """Asks ``transport`` for ``targets[n]`` of ``numbers`` into ``results``; returns the
        numbers worth asking again at another owner (never on the ``last`` attempt), a channel
        that did not answer noted in ``failures``."""
        if packed:
            request = pb.OffsetsForTimesRequest(packed=[targets[n] for n in numbers])
        else:
            request = pb.OffsetsForTimesRequest(partitions=[targets[n] for n in numbers])
        try:
            response = await transport.offsets_for_times(request)
            if packed:
                self._check_packed(response, len(numbers))
        except (ServiceUnavailableError, RequestTimeoutError) as error:
            if last or not _worth_following(error, transport is not self.bootstrap):
                raise
            failures.update(dict.fromkeys(numbers, error))
            return numbers
        answers = _answers(response, packed)
        if self._older_since:
            self._confirm_answered(answers, transport)
        return self._note_answers(numbers, answers, results, last=last)

    def _confirm_answered(self, answers: Any, answered: Transport) -> None:
        """``confirm`` each partition of ``answers`` (from ``answered``) that was answered, not
        refused naming another owner: a reader's lookup at the route held confirms it as a send
        does."""
        for answer in answers:
            if _hint_of(answer) is None:
                self.confirm(answer.topic, answer.partition, answered)

    def _note_answers(self, numbers: Any, answers: Any, results: list[Any], *, last: bool) -> list[int]:
        """``answers`` (of ``numbers``, in order) into ``results``; the numbers whose answer
        carries an owner hint (never on the ``last`` attempt), a refusal naming the owner routed
        there."""
        retry = []
        for number, result in zip(numbers, answers):
            results[number] = result
            error = None if last else _hint_of(result)
            if error is None:
                continue
            if error.owner_address and error.error_class == NotPartitionOwnerError.__name__:
                tp = TopicPartition(result.topic, result.partition)
                # Else stale (the route held is newer), unless older ones were named long enough.
                if error.owner_epoch >= self._epochs.get(tp, -1) or self._older_taken(tp):
                    self._routes[tp], self._epochs[tp] = error.owner_address, error.owner_epoch
                    self._older_since.pop(tp, None)
            retry.append(number)
        return retry

    async def refresh(self, seen: int | None = None) -> ClusterMetadata | None:
        """Ask Metadata (the bootstrap instance, then any other live one) and route by it; skipped
        when another caller refreshed since generation ``seen``. None when no instance answered
        (the routes stay as they were)."""
        if self._refresh_lock is None:
            self._refresh_lock = asyncio.Lock()
        async with self._refresh_lock:
            if seen is not None and seen != self._generation:
                return self.metadata
            for transport in self._metadata_sources():
                try:
                    response = await transport.metadata(cluster_pb.MetadataRequest())
                except SeglogError:
                    self._failures += 1
                    continue
                self._apply(metadata_from(response))
                return self.metadata
            return None

    def _metadata_sources(self) -> list[Transport]:
        sources = [self.bootstrap]
        if self.metadata is not None:
            for instance in self.metadata.instances:
                if instance.alive and instance.address and instance.address != self.bootstrap.server:
                    sources.append(self._owners.get(instance.address) or self._connection.connect_to(instance.address))
                    self._owners.setdefault(instance.address, sources[-1])
        return sources

    def _apply(self, metadata: ClusterMetadata) -> None:
        self._refreshes += 1
        self._generation += 1
        self.metadata = metadata
        if not metadata.cluster_mode:
            # A single process answers with its own listen address, which need not be the one
            # this client dialled: everything stays on the bootstrap channel.
            self._routes.clear()
            self._epochs.clear()
            self._older_since.clear()
            return
        routes: dict[TopicPartition, str] = {}
        epochs: dict[TopicPartition, int] = {}
        for p in metadata.partitions:
            if p.address:
                tp = TopicPartition(p.topic, p.partition)
                routes[tp], epochs[tp] = p.address, p.epoch
        if not metadata.current:
            # The answering instance's view of etcd is stale: what this client already knows (an
            # owner hint just taken from a refusal, above all) wins over it, with its epoch.
            for tp, address in self._routes.items():
                routes[tp] = address
                if tp in self._epochs:
                    epochs[tp] = self._epochs[tp]
                else:
                    epochs.pop(tp, None)
        else:
            # A current answer replaces every route but those it names at an older epoch than
            # the route held: the answering instance's watch lags a move (a route dropped back
            # to the previous owner while the new one lags too would ping-pong between them).
            # An older owner is taken once the first naming of one since the route was last
            # confirmed is a request timeout old (``_older_taken``): a topic deleted and
            # created again starts its epochs at 0. A partition the answer does not
            # name is dropped (its topic deleted), and with it its epoch.
            for tp, epoch in epochs.items():
                held = self._epochs.get(tp)
                if held is None or epoch >= held:
                    self._older_since.pop(tp, None)
                elif tp in self._routes and not self._older_taken(tp):
                    routes[tp], epochs[tp] = self._routes[tp], held
            for tp in [tp for tp in self._older_since if tp not in epochs]:
                del self._older_since[tp]
        # A hint newer than the answer is held over it by the ``follow`` that took it.
        self._routes = routes
        self._epochs = epochs

    async def close(self) -> None:
        """Close the owners' channels (the bootstrap one is its client's)."""
        owners, self._owners = list(self._owners.values()), {}
        for transport in owners:
            await transport.close()

    def statistics(self) -> RouterStatistics:
        return RouterStatistics(
            metadata_refreshes=self._refreshes,
            metadata_failures=self._failures,
            redirects=self.redirects,
            owner_channels=len(self._owners),
        )


class CoordinatorTransport:
    """The bootstrap ``Transport`` with its group RPCs sent to each group's coordinator
    (``Router.at_coordinator``): what a group consumer talks through, so a member bootstrapped at
    any instance of a cluster heartbeats and commits at its group's coordinator. Every other
    call is the bootstrap channel's; ``close`` closes the coordinators' channels too."""

    def __init__(self, connection: ConnectionOptions, bootstrap: Transport) -> None:
        self.router = Router(connection, bootstrap)

    async def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        return await self.router.at_coordinator(request.group, lambda t: t.heartbeat(request))

    async def commit_offsets(self, request: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
        return await self.router.at_coordinator(request.group, lambda t: t.commit_offsets(request))

    async def fetch_offsets(self, request: pb.FetchOffsetsRequest) -> pb.FetchOffsetsResponse:
        return await self.router.at_coordinator(request.group, lambda t: t.fetch_offsets(request))

    async def describe_group(self, request: pb.DescribeGroupRequest) -> pb.DescribeGroupResponse:
        return await self.router.at_coordinator(request.group, lambda t: t.describe_group(request))

    async def close(self) -> None:
        try:
            await self.router.close()
        finally:
            await self.router.bootstrap.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.router.bootstrap, name)


# What ``offsets_for_times``'s ``read`` returns for a first answer with an owner hint in it.
HINTED = object()


class PackedLookupsUnsupported(SeglogError):
    """A service answered a packed OffsetsForTimes in the old form only (a build from before the
    packed form): ask again in the old form."""


def _answers(response: pb.OffsetsForTimesResponse, packed: bool) -> Any:
    return response.packed if packed else response.results


def _hint_of(answer: Any) -> Any:
    """The owner-hinted PartitionError of an answer (a PartitionOffset, or a packed form's
    PartitionOffsets: its first target error naming an owner), or None."""
    if type(answer) is pb.PartitionOffsets:
        for failed in answer.errors:
            if failed.error.owner_id:
                return failed.error
        return None
    if answer.offset < 0 and answer.HasField("error") and answer.error.owner_id:
        return answer.error
    return None


def any_hinted(results: Any) -> bool:
    """Whether any answer carries an owner hint. Only a refused target has one, and its offset
    is -1 (the proto says so): the answers found are passed over on one field read each."""
    for result in results:
        if result.offset < 0 and result.HasField("error") and result.error.owner_id:
            return True
    return False


def _worth_following(error: SeglogError, routed: bool) -> bool:
    """A refusal naming the owner, or a routed owner's channel that no longer answers (down, or
    silent past the request timeout)."""
    if isinstance(error, NotPartitionOwnerError | OwnerUnavailableError):
        return True
    if isinstance(error, ServiceOverloadedError):
        return False  # alive, and busy: asking elsewhere changes nothing
    return routed and isinstance(error, ServiceUnavailableError | RequestTimeoutError)


def metadata_from(response: cluster_pb.MetadataResponse) -> ClusterMetadata:
    """``ClusterService.Metadata``'s answer as the client's frozen value."""
    instances = tuple(
        ClusterInstance(instance_id=i.instance_id, address=i.address, alive=i.alive) for i in response.instances
    )
    partitions = tuple(sorted(
        (PartitionOwner(topic=p.topic, partition=p.partition, owner_id=p.owner_id, address=p.owner_address,
                        epoch=p.epoch, owner_alive=p.owner_alive) for p in response.partitions),
        key=lambda p: (p.topic, p.partition),
    ))
    return ClusterMetadata(
        cluster_mode=response.cluster_mode,
        cluster_name=response.cluster_name,
        instance_id=response.instance_id,
        instances=instances,
        partitions=partitions,
        current=response.current,
    )
