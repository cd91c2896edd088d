"""Topic administration and offset look-ups.

``AsyncAdmin`` is the implementation; ``Admin`` is its synchronous facade (see ``seglog._sync``).
Names follow Kafka's admin clients: ``create_topic`` takes Kafka's topic config names
(``retention.ms``, ``cleanup.policy``, ...); ``offsets_for_times`` and ``delete_records`` take a
mapping keyed by ``TopicPartition`` and answer with one, like kafka-python's;
``offsets_for_times_many`` takes a sequence of ``(TopicPartition, timestamp_ms)`` targets, any
number per partition, and answers a list in the same order.
"""

from __future__ import annotations

import contextlib
import logging
import operator
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from seglog import _moves, _sync
from seglog._connection import ConnectionOptions
from seglog._lookup_answers import packed_answers, packed_timestamps
from seglog._routing import HINTED, PackedLookupsUnsupported, Router, any_hinted, metadata_from
from seglog._security import PemSource
from seglog.cleaning import CleanablePartition, CleaningCommit, SnapshotInfo
from seglog.client import REQUEST_TIMEOUT_MS_DEFAULT, Transport
from seglog.errors import (
    ClientClosedError,
    RequestTimeoutError,
    SeglogError,
    ServiceError,
    ServiceUnavailableError,
    TopicExistsError,
    error_from_partition,
)
from seglog.structs import (
    DEFAULT_SERVER,
    ClusterMetadata,
    EARLIEST_TIMESTAMP,
    GroupDescription,
    GroupListing,
    GroupMemberDescription,
    GroupPartitionLag,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    OffsetAndTimestamp,
    PartitionDescription,
    TopicDescription,
    TopicInfo,
    TopicPartition,
)
from seglog.v1 import cluster_pb2 as cluster_pb
from seglog.v1 import log_service_pb2 as pb

__all__ = ["Admin", "AsyncAdmin"]

# DeleteRecords' "up to the high watermark": delete every record currently in the partition.
DELETE_ALL = -1
_T = TypeVar("_T")
_log = logging.getLogger("seglog.admin")
_new_tuple = tuple.__new__
_first, _second = operator.itemgetter(0), operator.itemgetter(1)
# The fewest targets asked in OffsetsForTimes' packed form: below, the old form's message per
# target costs less than the packed form's grouping and reading (measured: building and reading
# one target 2.5 us in the old form, 5.6 in the packed; four 7.0 and 8.0; eight 15.2 and 11.2).
_PACKED_TARGETS_MIN = 8
# ... and, over several partitions, the fewest targets a partition on average: each entry costs
# more than a target's message of the old form (100 targets over 100 partitions: 121 us in the
# old form, 458 packed; over 10: 145 and 179; over 4: 178 and 112).
_PACKED_TARGETS_PER_PARTITION_MIN = 16
# The packed entry's timestamps field, for its wire form (packed_timestamps).
_TIMESTAMPS_FIELD = pb.PartitionTimestamps.DESCRIPTOR.fields_by_name["timestamps_ms"].number


def _read_offsets(results: Any, last: bool) -> Any:
    """OffsetsForTimes' answers as ``offsets_for_times_many`` returns them, or the router's
    ``HINTED`` on a first answer (``last`` False) in which some target carries an owner hint;
    otherwise a target's error is raised (the first, naming its partition). One pass: each field
    read of a upb message costs about as much as a dict look-up."""
    found: list[OffsetAndTimestamp | None] = []
    keep = found.append
    for result in results:
        offset = result.offset
        if offset >= 0:  # an answer (a refused target's offset is -1: the proto says so)
            # tuple.__new__ directly: the NamedTuple's own __new__ is a Python function.
            keep(_new_tuple(OffsetAndTimestamp, (offset, result.timestamp_ms)))
        elif result.HasField("error"):
            if not last and any_hinted(results):
                return HINTED  # the router asks the hinted targets' owners, then reads again
            raise error_from_partition(result.error, f"{result.topic}-{result.partition}")
        else:
            keep(None)
    return found


def _packed_request(
    targets: Sequence[tuple[TopicPartition, int]],
) -> tuple[pb.OffsetsForTimesRequest, list[list[int]] | None] | None:
    """``targets`` in OffsetsForTimes' packed form (an entry per partition, its timestamps one
    packed list: no message per target), and per entry the targets' numbers in ``targets``
    (None for one entry holding every target in order: the common case, built without a loop
    in Python); None when the targets are spread too thin over partitions for the packed form
    to cost less (``_PACKED_TARGETS_PER_PARTITION_MIN``)."""
    request = pb.OffsetsForTimesRequest()
    if not targets:
        return request, []
    if packed_timestamps is not None:
        # Every target of one partition object (the usual call): the timestamps' wire form built
        # in C and parsed by upb, no int converted by upb's extend (None: the general way below).
        first = targets[0][0]
        wire = packed_timestamps(targets, first, _TIMESTAMPS_FIELD)
        if wire is not None:
            entry = request.packed.add()
            entry.topic, entry.partition = first.topic, first.partition
            entry.MergeFromString(wire)
            return request, None
    partitions = list(map(_first, targets))
    first = partitions[0]
    if partitions.count(first) == len(partitions):
        entry = request.packed.add()
        entry.topic, entry.partition = first.topic, first.partition
        entry.timestamps_ms.extend(map(_second, targets))
        return request, None
    if len(set(partitions)) * _PACKED_TARGETS_PER_PARTITION_MIN > len(targets):
        return None
    groups: dict[Any, tuple[list[int], list[int]]] = {}
    for number, (tp, timestamp_ms) in enumerate(targets):
        group = groups.get(tp)
        if group is None:
            group = groups[tp] = ([], [])
        group[0].append(number)
        group[1].append(timestamp_ms)
    add = request.packed.add
    numbers = []
    for tp, (at, timestamps_ms) in groups.items():
        entry = add()
        entry.topic, entry.partition = tp.topic, tp.partition
        entry.timestamps_ms.extend(timestamps_ms)
        numbers.append(at)
    return request, numbers


def _packed_reader(numbers: list[list[int]] | None, count: int) -> Callable[[Any, bool], Any]:
    """``_read_offsets`` for the packed form's answers (``numbers`` as ``_packed_request``
    made them): the same results, HINTED and first error (the earliest target's)."""

    def read(entries: Any, last: bool) -> Any:
        found: list[OffsetAndTimestamp | None] = [None] * count
        failed: tuple[int, Any, Any] | None = None  # the earliest failed target: number, entry, error
        for at, entry in zip([None] if numbers is None else numbers, entries, strict=True):
            offsets, timestamps_ms = entry.offsets[:], entry.timestamps_ms[:]  # lists: quicker to read than upb's fields
            asked = count if at is None else len(at)
            if len(offsets) != asked or len(timestamps_ms) != asked:
                raise ServiceError(f"OffsetsForTimes answered {len(offsets)} offsets for {asked} targets "
                                   f"of {entry.topic}-{entry.partition}")
            # A refused target's offset is -1, as is one with no record at or after its time
            # (the proto says so): None. Built in compiled code where installed (_lookup_answers).
            answers: list[Any] = packed_answers(offsets, timestamps_ms, OffsetAndTimestamp)
            if at is None:
                found = answers
            else:
                for number, answer in zip(at, answers):
                    found[number] = answer
            for error in entry.errors:
                if not 0 <= error.index < asked:
                    raise ServiceError(f"OffsetsForTimes answered an error for target {error.index} of "
                                       f"{asked} of {entry.topic}-{entry.partition}")
                number = error.index if at is None else at[error.index]
                if failed is None or number < failed[0]:
                    failed = (number, entry, error.error)
        if failed is not None:
            if not last and any(e.error.owner_id for entry in entries for e in entry.errors):
                return HINTED  # the router asks the hinted entries' owners, then reads again
            _, entry, error = failed
            raise error_from_partition(error, f"{entry.topic}-{entry.partition}")
        return found

    return read


class AsyncAdmin:
    """An asyncio admin client (the implementation behind ``Admin``)."""

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        *,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        tls: bool | None = None,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        token: str | None = None,
    ) -> None:
        # Connecting needs the running loop (a grpc.aio rule), so it waits for start().
        self._connection = ConnectionOptions.resolve(
            server, request_timeout_ms=request_timeout_ms, credentials=credentials, channel_options=channel_options,
            tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token,
        )
        self._transport: Transport | None = None
        # Requests naming a partition go to its owner (cluster mode, _routing.py): offsets for
        # times, DeleteRecords, ExplainLookup; the bootstrap channel otherwise.
        self._router: Router | None = None
        # The instance each cleaning snapshot lives on (cluster mode: its partition's owner when
        # it was taken), so CommitCleaned and DropSnapshot go where the snapshot is.
        self._snapshot_sites: dict[str, Transport] = {}
        self._closed = False
        # A single lookup's LookupStreamRequest, its one target set in place for the next
        # (``offsets_for_times``): held by one lookup at a time, kept only after an answer (its
        # write is done then; a lookup that raised or was cancelled may have left it unwritten).
        # (the message, its request, its target, and the partition the target names).
        self._single_message: tuple[pb.LookupStreamRequest, Any, Any, TopicPartition] | None = None

    async def start(self) -> None:
        if self._closed:
            raise ClientClosedError("the admin client is closed")
        if self._transport is None:
            self._transport = self._connection.connect()
            self._router = Router(self._connection, self._transport)

    async def __aenter__(self) -> AsyncAdmin:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._router is not None:
            await self._router.close()
        if self._transport is not None:
            await self._transport.close()

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str | int] | None = None,
        *,
        validate_only: bool = False,
        exist_ok: bool = False,
    ) -> TopicInfo:
        """Create a topic; returns it with every effective config. TopicExistsError if it exists,
        unless ``exist_ok``: then the existing topic is returned as it is (its partition count
        and configs may differ from the ones asked for; compare them if that matters)."""
        request = pb.CreateTopicRequest(
            topic=name,
            partitions=partitions,
            configs={k: str(v) for k, v in (configs or {}).items()},
            validate_only=validate_only,
        )
        try:
            response = await (await self._connected()).create_topic(request)
        except TopicExistsError:
            if not exist_ok:
                raise
            existing = await self.describe_topic(name)
            return TopicInfo(existing.topic, existing.partition_count, dict(existing.configs))
        return TopicInfo(response.topic, response.partitions, dict(response.configs))

    async def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data. TopicNotFoundError if there is none."""
        await (await self._connected()).delete_topic(pb.DeleteTopicRequest(topic=name))

    async def alter_topic_configs(
        self,
        name: str,
        set_configs: Mapping[str, str | int] | None = None,
        delete_configs: Sequence[str] = (),
        *,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """Change a topic's configs (Kafka's incrementalAlterConfigs): each name in
        ``set_configs`` takes its value, each name in ``delete_configs`` returns to the service
        default; returns every effective config after the change (with ``validate_only``, the
        ones the change would give, nothing changed). InvalidRequestError names a bad key or value
        (nothing changes); TopicNotFoundError if there is no such topic."""
        request = pb.AlterTopicConfigsRequest(
            topic=name,
            set_configs={k: str(v) for k, v in (set_configs or {}).items()},
            delete_configs=list(delete_configs),
            validate_only=validate_only,
        )
        response = await (await self._connected()).alter_topic_configs(request)
        return dict(response.configs)

    async def list_topics(self) -> list[TopicInfo]:
        """Every topic with its partition count, sorted by name."""
        response = await (await self._connected()).list_topics(pb.ListTopicsRequest())
        return [TopicInfo(t.topic, t.partitions) for t in response.topics]

    async def describe_topic(self, name: str) -> TopicDescription:
        """Configs and per-partition offsets and sizes. TopicNotFoundError if there is none. In
        cluster mode each partition's figures come from its owner (the instance asked marks the
        others' ``owned_elsewhere``; each owner is asked once for its own); a partition whose
        owner does not answer keeps -1 offsets and sizes."""
        request = pb.DescribeTopicRequest(topic=name)
        response = await (await self._connected()).describe_topic(request)
        await self._owners_figures(request, response)
        partitions = tuple(
            PartitionDescription(
                partition=p.partition,
                log_start_offset=p.log_start_offset,
                log_end_offset=p.log_end_offset,
                high_watermark=p.high_watermark,
                size_bytes=p.size_bytes,
                segment_count=p.segment_count,
                log_dir=p.log_dir,
                local_log_start_offset=p.local_log_start_offset,
                remote_segment_count=p.remote_segment_count,
                remote_size_bytes=p.remote_size_bytes,
            )
            for p in response.partitions
        )
        return TopicDescription(
            response.topic,
            dict(response.configs),
            partitions,
            response.partition_count or len(partitions),
        )

    async def _owners_figures(self, request: pb.DescribeTopicRequest, response: pb.DescribeTopicResponse) -> None:
        """Replaces each ``owned_elsewhere`` partition of ``response`` with its owner's own
        description (one DescribeTopic per owner)."""
        elsewhere: dict[str, list[int]] = {}
        for index, p in enumerate(response.partitions):
            if p.owned_elsewhere and p.owner_address:
                elsewhere.setdefault(p.owner_address, []).append(index)
        router = self._router
        for address, indexes in elsewhere.items():
            assert router is not None
            try:
                answer = await router._channel_to(address).describe_topic(request)
            except SeglogError:
                continue  # gone or unreachable: its partitions keep -1 (the owner's to tell)
            own = {p.partition: p for p in answer.partitions if not p.owned_elsewhere}
            for index in indexes:
                found = own.get(response.partitions[index].partition)
                if found is not None:
                    response.partitions[index].CopyFrom(found)

    async def list_groups(self) -> list[GroupListing]:
        """The consumer groups (with members or committed offsets), sorted. In cluster mode each
        instance lists the groups it coordinates; as Kafka's admin client, this asks every live
        instance (Metadata's list) and merges the answers; one that does not answer is skipped,
        a warning naming it (``_at_every_instance``)."""
        listed: dict[str, GroupListing] = {}
        for _, response in await self._at_every_instance("ListGroups", lambda t: t.list_groups(pb.ListGroupsRequest())):
            for g in response.groups:
                listed.setdefault(g.group, GroupListing(g.group, g.state, g.member_count))
        return [listed[name] for name in sorted(listed)]

    async def _at_every_instance(self, name: str, call: Callable[[Transport], Awaitable[_T]]) -> list[tuple[Transport, _T]]:
        """``call`` at every live instance (Metadata's list), in turn. An instance that does not
        answer (UNAVAILABLE, or silent past the request timeout: killed or paused, and shown
        alive until its lease expires) is skipped and logged as a warning naming it, as Kafka's
        admin client lists what the reachable brokers answered beside each failed broker's error;
        the others' answers are returned. Raises the first such error when no instance answered."""
        await self._connected()
        assert self._router is not None
        answers: list[tuple[Transport, _T]] = []
        skipped: list[tuple[Transport, SeglogError]] = []
        for transport in await self._router.instances():
            try:
                answers.append((transport, await call(transport)))
            except (ServiceUnavailableError, RequestTimeoutError) as error:
                skipped.append((transport, error))
        if skipped and not answers:
            raise skipped[0][1]
        if skipped:
            _log.warning("%s: %d instance(s) skipped, the answer lacks what they hold: %s", name, len(skipped),
                         "; ".join(f"{transport.server}: {error}" for transport, error in skipped))
        return answers

    async def describe_group(self, group: str) -> GroupDescription:
        """A group's members and, per partition, its committed offset, log end offset and lag
        (as ``kafka-consumer-groups --describe``). An unknown group is state "Dead", empty."""
        if not group:
            raise ValueError("group id is empty")
        response = await self._at_coordinator(group, lambda t: t.describe_group(pb.DescribeGroupRequest(group=group)))
        ends = await self._owners_log_ends(
            [TopicPartition(p.topic, p.partition) for p in response.partitions if p.log_end_offset < 0])
        for p in response.partitions:
            end = ends.get(TopicPartition(p.topic, p.partition))
            if end is not None:  # a partition another instance owns: its end from the owner
                p.log_end_offset = end
                p.lag = end - p.committed_offset if p.committed_offset >= 0 else -1
        return GroupDescription(
            group=response.group,
            state=response.state,
            group_epoch=response.group_epoch,
            members=tuple(
                GroupMemberDescription(
                    m.member_id, m.member_epoch, tuple(m.subscribed_topics),
                    tuple(TopicPartition(p.topic, p.partition) for p in m.owned_partitions),
                    m.instance_id, m.client_id, m.host,
                )
                for m in response.members
            ),
            partitions=tuple(
                GroupPartitionLag(p.topic, p.partition, p.committed_offset, p.log_end_offset, p.lag,
                                  p.member_id, p.metadata)
                for p in response.partitions
            ),
        )

    async def _owners_log_ends(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The log end offsets of partitions the coordinator could not tell (cluster mode: owned
        by another instance), asked of their owners as ``latest_offsets`` asks (the lookup follows
        each partition's owner, with this client's credentials). One request for all; should it
        fail (a partition offline, unknown or its owner away), each on its own, a failing one
        left out (its end stays -1)."""
        if not partitions:
            return {}
        try:
            found = await self.offsets_for_times_many([(tp, LATEST_TIMESTAMP) for tp in partitions])
            return {tp: hit.offset for tp, hit in zip(partitions, found) if hit is not None}
        except SeglogError:
            ends: dict[TopicPartition, int] = {}
            for tp in partitions:
                with contextlib.suppress(SeglogError):
                    [hit] = await self.offsets_for_times_many([(tp, LATEST_TIMESTAMP)])
                    if hit is not None:
                        ends[tp] = hit.offset
            return ends

    async def delete_group(self, group: str) -> int:
        """Deletes a group without members and its committed offsets (``kafka-consumer-groups
        --delete``); returns the offsets deleted. A group with members is refused
        (``ServiceError`` FAILED_PRECONDITION), an unknown one NOT_FOUND."""
        if not group:
            raise ValueError("group id is empty")
        response = await self._at_coordinator(group, lambda t: t._unary("DeleteGroup", pb.DeleteGroupRequest(group=group)))
        return int(response.deleted_offsets)

    async def reset_offsets(
        self, group: str, topic: str, partitions: Sequence[int] | None = None, *,
        to_earliest: bool = False, to_latest: bool = False, to_offset: int | None = None,
        to_datetime_ms: int | None = None, shift_by: int | None = None, execute: bool = False,
    ) -> dict[TopicPartition, int]:
        """The offsets ``kafka-consumer-groups --reset-offsets`` would commit for ``group`` on
        ``topic``'s partitions (every one unless named), committed only with ``execute``: exactly
        one of the earliest or latest offset, ``to_offset`` or the committed offset moved by
        ``shift_by`` (both kept within [log start, log end]), or the first offset at or after
        ``to_datetime_ms`` (the log end when none). Only for a group without members (state
        Empty, or unknown); the service refuses the commit too if a member joined meanwhile."""
        chosen = [to_earliest, to_latest, to_offset is not None, to_datetime_ms is not None, shift_by is not None]
        if sum(chosen) != 1:
            raise ValueError("choose exactly one of to_earliest, to_latest, to_offset, to_datetime_ms, shift_by")
        description = await self.describe_group(group)
        if description.state not in ("Empty", "Dead"):
            raise ValueError(f"offsets can only be reset if the group {group!r} is inactive, but its state "
                             f"is {description.state} with {len(description.members)} members")
        starts = await self.earliest_offsets(topic, partitions)
        ends = await self.latest_offsets(topic, partitions)
        planned: dict[TopicPartition, int] = {}
        if to_datetime_ms is not None:
            found = await self.offsets_for_times({TopicPartition(topic, p): to_datetime_ms for p in sorted(starts)})
            for tp, hit in found.items():
                planned[tp] = ends[tp.partition] if hit is None else hit.offset
        for partition in sorted(starts):
            tp = TopicPartition(topic, partition)
            low, high = starts[partition], ends[partition]
            if to_earliest:
                planned[tp] = low
            elif to_latest:
                planned[tp] = high
            elif to_offset is not None:
                planned[tp] = min(max(to_offset, low), high)
            elif shift_by is not None:
                current = next((p.committed_offset for p in description.partitions
                                if (p.topic, p.partition) == (topic, partition) and p.committed_offset >= 0), None)
                if current is None:
                    raise ValueError(f"group {group!r} has no committed offset for {topic}-{partition} to shift")
                planned[tp] = min(max(current + shift_by, low), high)
        planned = dict(sorted(planned.items()))
        if execute:
            request = pb.CommitOffsetsRequest(group=group, offsets=[
                pb.OffsetToCommit(topic=tp.topic, partition=tp.partition, offset=offset)
                for tp, offset in planned.items()])
            await self._at_coordinator(group, lambda t: t.commit_offsets(request))
        return planned

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first record with timestamp >= the target, or None when there is none.

        Targets may be EARLIEST_TIMESTAMP, LATEST_TIMESTAMP or MAX_TIMESTAMP (seglog.structs).
        """
        if len(timestamps) != 1:
            found = await self.offsets_for_times_many(list(timestamps.items()))
            return dict(zip(timestamps, found))
        # A single lookup: ``offsets_for_times_many``'s request (the old form, as for fewer than
        # eight targets), routing, answer and errors, in this call. The stream message is built
        # once and its target set in place (``_single_message``), handed to the router with the
        # request inside it: no request built apart and copied into a message.
        [(tp, timestamp_ms)] = timestamps.items()
        if self._closed or self._router is None:
            await self.start()
        router = self._router
        assert router is not None
        single = self._single_message
        if single is None:  # the first, or another lookup holds it (or kept it unwritten)
            message = pb.LookupStreamRequest()
            request = message.offsets_for_times
            target = request.partitions.add()
            target.topic, target.partition = tp.topic, tp.partition
        else:
            self._single_message = None
            message, request, target, last = single
            if tp != last:  # (upb sets a string field by copying it: skipped for the same partition)
                target.topic, target.partition = tp.topic, tp.partition
        target.timestamp_ms = timestamp_ms
        found = await router.offsets_for_times(request, _read_offsets, message)
        self._single_message = (message, request, target, tp)  # answered: written, free for the next lookup
        if len(found) != 1:
            raise ServiceError(f"OffsetsForTimes answered {len(found)} results for 1 targets")
        return {tp: found[0]}

    async def offsets_for_times_many(
        self, targets: Sequence[tuple[TopicPartition, int]]
    ) -> list[OffsetAndTimestamp | None]:
        """For each ``(partition, timestamp_ms)`` target, in order, the first record with a
        timestamp >= it, or None when there is none: ``offsets_for_times`` with any number of
        timestamps per partition (a mapping holds one), all in one request.

        One request, on the connection's LookupStream like ``offsets_for_times``: the per-call
        cost is shared by every target, and the service searches a partition's targets together
        (thousands of lookups per call answer far faster than one call each). Targets may repeat
        and may be EARLIEST_TIMESTAMP, LATEST_TIMESTAMP or MAX_TIMESTAMP. When any target fails,
        the first failure is raised (as ``offsets_for_times`` raises), naming its partition.

        From eight targets on (and sixteen a partition on average over several), asked in the
        packed form (a partition's timestamps one packed list each way); a service from before
        it answers nothing to that, and is asked in the old form from then on.
        """
        await self._connected()
        router = self._router
        assert router is not None
        found: list[OffsetAndTimestamp | None] | None = None
        packed = _packed_request(targets) if router.packed_lookups and len(targets) >= _PACKED_TARGETS_MIN else None
        if packed is not None:
            request, numbers = packed
            with contextlib.suppress(PackedLookupsUnsupported):  # an older service: the old form below
                found = await router.offsets_for_times(request, _packed_reader(numbers, len(targets)))
        if found is None:
            request = pb.OffsetsForTimesRequest()
            add = request.partitions.add  # in place: a message built apart is copied in (upb)
            for tp, ts in targets:
                # Field by field: keywords cost a third more a target (the call parses them).
                target = add()
                target.topic, target.partition, target.timestamp_ms = tp.topic, tp.partition, ts
            found = await router.offsets_for_times(request, _read_offsets)  # each target at its owner
        if len(found) != len(targets):
            raise ServiceError(f"OffsetsForTimes answered {len(found)} results for {len(targets)} targets")
        return found

    async def earliest_offsets(self, topic: str, partitions: Sequence[int] | None = None) -> dict[int, int]:
        """Per partition, the log start offset."""
        return await self._special_offsets(topic, partitions, EARLIEST_TIMESTAMP)

    async def latest_offsets(self, topic: str, partitions: Sequence[int] | None = None) -> dict[int, int]:
        """Per partition, the log end offset (the offset the next record will get)."""
        return await self._special_offsets(topic, partitions, LATEST_TIMESTAMP)

    async def max_timestamp_offsets(
        self, topic: str, partitions: Sequence[int] | None = None
    ) -> dict[int, OffsetAndTimestamp | None]:
        """Per partition, the record with the largest timestamp (None in an empty partition)."""
        partitions = await self._partitions_of(topic, partitions)
        found = await self.offsets_for_times({TopicPartition(topic, p): MAX_TIMESTAMP for p in partitions})
        return {tp.partition: hit for tp, hit in found.items()}

    async def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Move each partition's log start offset up to the given offset (DELETE_ALL = -1: the
        high watermark); returns the new log start offsets. Each at the partition's owner."""
        await self._connected()
        router = self._router
        assert router is not None
        result: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            request = pb.DeleteRecordsRequest(topic=tp.topic, partition=tp.partition, offset=offset)
            answer = await router.at_owner(tp.topic, tp.partition, lambda t, r=request: t.delete_records(r))
            result[tp] = answer.log_start_offset
        return result

    # -- offline cleaning (compacted topics) -------------------------------------------------------

    async def list_cleanable(self, topic: str | None = None) -> list[CleanablePartition]:
        """Every compacted partition (of ``topic``) with its dirty ratio, eligible and dirtiest first.
        In cluster mode each instance lists the partitions it owns: every live instance is asked
        (Metadata's list) and the answers merged, so a cleaner started with any bootstrap address
        sees the whole cluster. An instance that does not answer is skipped, a warning naming it:
        one cleaner round cleans what the others own rather than failing whole."""
        request = pb.ListCleanableRequest(topic=topic or "")
        found: dict[tuple[str, int], CleanablePartition] = {}
        for transport, response in await self._at_every_instance("ListCleanable", lambda t: t.list_cleanable(request)):
            for p in response.partitions:
                for snapshot_id in p.open_snapshot_ids:
                    self._snapshot_sites[snapshot_id] = transport
                found.setdefault((p.topic, p.partition), _cleanable(p))
        return sorted(found.values(), key=lambda c: (not c.eligible, -c.dirty_ratio, c.topic, c.partition))

    async def create_snapshot(self, topic: str, partition: int, *, include_local_path: bool = False,
                              export_to_store: bool = False) -> SnapshotInfo:
        """Snapshot a compacted partition's cleanable segments for a cleaning job.
        FailedPreconditionError when the topic is not compacted or nothing is cleanable.
        ``export_to_store``: also copied to the service's object store (``store_url``), for a
        cleaner without the service's disk; FailedPreconditionError on a service without a store,
        ServiceUnavailableError when the store is down."""
        request = pb.CreateSnapshotRequest(topic=topic, partition=partition, include_local_path=include_local_path,
                                           export_to_store=export_to_store)
        await self._connected()
        assert self._router is not None

        async def take(transport: Transport) -> pb.CreateSnapshotResponse:
            answer = await transport.create_snapshot(request)
            self._snapshot_sites[answer.snapshot_id] = transport
            return answer

        r = await self._router.at_owner(topic, partition, take)  # at the partition's owner
        return SnapshotInfo(
            r.snapshot_id, r.log_dir, r.relative_path, r.local_path or None, r.manifest_json,
            r.segment_count, r.size_bytes, r.first_dirty_offset, r.first_uncleanable_offset,
            r.store_url or None,
        )

    async def commit_cleaned(self, snapshot_id: str) -> CleaningCommit:
        """Install a snapshot's cleaning result. FailedPreconditionError (with what changed) when
        the result is stale or damaged; nothing is installed then."""
        r = await (await self._snapshot_site(snapshot_id)).commit_cleaned(
            pb.CommitCleanedRequest(snapshot_id=snapshot_id))
        self._snapshot_sites.pop(snapshot_id, None)
        return CleaningCommit(
            r.topic, r.partition, r.replaced_segment_count, r.installed_segment_count,
            r.bytes_before, r.bytes_after, r.cleaned_up_to_offset,
        )

    async def drop_snapshot(self, snapshot_id: str) -> bool:
        """Remove a snapshot that will not be committed; False when there was none."""
        response = await (await self._snapshot_site(snapshot_id)).drop_snapshot(
            pb.DropSnapshotRequest(snapshot_id=snapshot_id))
        self._snapshot_sites.pop(snapshot_id, None)
        return response.dropped

    async def _snapshot_site(self, snapshot_id: str) -> Transport:
        """The instance the snapshot was taken or listed at; the bootstrap instance otherwise."""
        bootstrap = await self._connected()
        return self._snapshot_sites.get(snapshot_id, bootstrap)

    async def explain_lookup(
        self, topic: str, partition: int, *, offset: int | None = None, timestamp_ms: int | None = None
    ) -> pb.ExplainLookupResponse:
        """The lookup path of one offset (a Fetch's) or timestamp (OffsetsForTimes'): segment,
        index searches with their zone, probed slots and pages, bytes scanned, time taken."""
        if (offset is None) == (timestamp_ms is None):
            raise ValueError("explain_lookup needs exactly one of offset and timestamp_ms")
        request = pb.ExplainLookupRequest(topic=topic, partition=partition)
        if offset is not None:
            request.offset = offset
        else:
            request.timestamp_ms = timestamp_ms  # type: ignore[assignment]
        await self._connected()
        assert self._router is not None  # the partition's owner explains its own lookup
        return await self._router.at_owner(topic, partition, lambda transport: transport.explain_lookup(request))

    async def metadata(self, topics: Sequence[str] = ()) -> ClusterMetadata:
        """The cluster's instances and each partition's owner, address and epoch
        (``ClusterService.Metadata``; ``topics`` narrows the partitions, empty: every topic). A
        single process answers ``cluster_mode=False`` with itself the owner of everything."""
        request = cluster_pb.MetadataRequest(topics=list(topics))
        return metadata_from(await (await self._connected()).metadata(request))

    async def move_partition(self, topic: str, partition: int, to: str, *, from_instance: str | None = None,
                             timeout_s: float = _moves.MOVE_TIMEOUT_S_DEFAULT) -> _moves.PartitionMove:
        """Moves the partition to instance ``to`` (cluster mode) and returns once the move
        committed: the new owner holds the same offsets and bytes, producer state included, at
        the epoch + 1. ``from_instance``: refused unless that instance owns it now. Fails with
        the source still the owner (docs/cluster.md, "Moving a partition")."""
        await self.start()
        assert self._router is not None
        return await _moves.move_partition(self._router, topic, partition, to, from_instance, timeout_s)

    async def abort_move(self, topic: str, partition: int) -> bool:
        """Ends a move in progress (one left by a crash): the owner stays. False: none was."""
        await self.start()
        return await _moves.abort_move(self._router, topic, partition, self._connection.request_timeout_ms / 1000)

    async def take_over_partition(self, topic: str, partition: int, *, unclean: bool = False) -> _moves.PartitionTakeover:
        """Unclean takeover, by the bootstrap instance, of a partition whose owner's lease is
        gone: it starts empty past every offset the dead owner could have acknowledged (its
        offset ceiling in etcd), so none is handed out twice; every record the dead owner held is
        lost to readers. Refused unless ``unclean``."""
        await self.start()
        return await _moves.take_over_partition(self._router, topic, partition, unclean,
                                                self._connection.request_timeout_ms / 1000)

    async def cluster_status(self) -> _moves.ClusterStatus:
        """Instances (alive, partitions and bytes each), offline partitions and moves in
        progress, from the bootstrap instance's view of etcd (cluster mode only)."""
        await self.start()
        return await _moves.cluster_status(self._router, self._connection.request_timeout_ms / 1000)

    async def _special_offsets(self, topic: str, partitions: Sequence[int] | None, target: int) -> dict[int, int]:
        partitions = await self._partitions_of(topic, partitions)
        found = await self.offsets_for_times({TopicPartition(topic, p): target for p in partitions})
        return {tp.partition: hit.offset for tp, hit in found.items() if hit is not None}

    async def _partitions_of(self, topic: str, partitions: Sequence[int] | None) -> Sequence[int]:
        if partitions is not None:
            return partitions
        return [p.partition for p in (await self.describe_topic(topic)).partitions]

    async def _connected(self) -> Transport:
        await self.start()
        assert self._transport is not None
        return self._transport

    async def _at_coordinator(self, group: str, send: Callable[[Transport], Awaitable[_T]]) -> _T:
        """A group RPC at the group's coordinator (cluster mode: the instance a refusal names)."""
        await self.start()
        assert self._router is not None
        return await self._router.at_coordinator(group, send)


def _cleanable(p: pb.CleanablePartition) -> CleanablePartition:
    return CleanablePartition(
        topic=p.topic,
        partition=p.partition,
        log_dir=p.log_dir,
        dirty_ratio=p.dirty_ratio,
        min_cleanable_dirty_ratio=p.min_cleanable_dirty_ratio,
        cleanable_bytes=p.cleanable_bytes,
        clean_bytes=p.clean_bytes,
        first_dirty_offset=p.first_dirty_offset,
        first_uncleanable_offset=p.first_uncleanable_offset,
        log_start_offset=p.log_start_offset,
        log_end_offset=p.log_end_offset,
        compaction_delay_ms=p.compaction_delay_ms,
        must_clean=p.must_clean,
        eligible=p.eligible,
        open_snapshot_ids=tuple(p.open_snapshot_ids),
    )


class Admin(_sync.SyncFacade, implementation=AsyncAdmin):
    """A synchronous admin client: the same methods as ``AsyncAdmin``."""

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str | int] | None = None,
        *,
        validate_only: bool = False,
        exist_ok: bool = False,
    ) -> TopicInfo:
        return self._portal.run(
            self._async.create_topic(name, partitions, configs, validate_only=validate_only, exist_ok=exist_ok)
        )

    def delete_topic(self, name: str) -> None:
        self._portal.run(self._async.delete_topic(name))

    def alter_topic_configs(
        self,
        name: str,
        set_configs: Mapping[str, str | int] | None = None,
        delete_configs: Sequence[str] = (),
        *,
        validate_only: bool = False,
    ) -> dict[str, str]:
        return self._portal.run(
            self._async.alter_topic_configs(name, set_configs, delete_configs, validate_only=validate_only))

    def list_topics(self) -> list[TopicInfo]:
        return self._portal.run(self._async.list_topics())

    def describe_topic(self, name: str) -> TopicDescription:
        return self._portal.run(self._async.describe_topic(name))

    def list_groups(self) -> list[GroupListing]:
        return self._portal.run(self._async.list_groups())

    def describe_group(self, group: str) -> GroupDescription:
        return self._portal.run(self._async.describe_group(group))

    def delete_group(self, group: str) -> int:
        return self._portal.run(self._async.delete_group(group))

    def reset_offsets(
        self, group: str, topic: str, partitions: Sequence[int] | None = None, *,
        to_earliest: bool = False, to_latest: bool = False, to_offset: int | None = None,
        to_datetime_ms: int | None = None, shift_by: int | None = None, execute: bool = False,
    ) -> dict[TopicPartition, int]:
        return self._portal.run(self._async.reset_offsets(
            group, topic, partitions, to_earliest=to_earliest, to_latest=to_latest, to_offset=to_offset,
            to_datetime_ms=to_datetime_ms, shift_by=shift_by, execute=execute))

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._portal.run(self._async.offsets_for_times(timestamps))

    def offsets_for_times_many(self, targets: Sequence[tuple[TopicPartition, int]]) -> list[OffsetAndTimestamp | None]:
        return self._portal.run(self._async.offsets_for_times_many(targets))

    def earliest_offsets(self, topic: str, partitions: Sequence[int] | None = None) -> dict[int, int]:
        return self._portal.run(self._async.earliest_offsets(topic, partitions))

    def latest_offsets(self, topic: str, partitions: Sequence[int] | None = None) -> dict[int, int]:
        return self._portal.run(self._async.latest_offsets(topic, partitions))

    def max_timestamp_offsets(
        self, topic: str, partitions: Sequence[int] | None = None
    ) -> dict[int, OffsetAndTimestamp | None]:
        return self._portal.run(self._async.max_timestamp_offsets(topic, partitions))

    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return self._portal.run(self._async.delete_records(offsets))

    def list_cleanable(self, topic: str | None = None) -> list[CleanablePartition]:
        return self._portal.run(self._async.list_cleanable(topic))

    def create_snapshot(self, topic: str, partition: int, *, include_local_path: bool = False,
                        export_to_store: bool = False) -> SnapshotInfo:
        return self._portal.run(self._async.create_snapshot(
            topic, partition, include_local_path=include_local_path, export_to_store=export_to_store))

    def commit_cleaned(self, snapshot_id: str) -> CleaningCommit:
        return self._portal.run(self._async.commit_cleaned(snapshot_id))

    def drop_snapshot(self, snapshot_id: str) -> bool:
        return self._portal.run(self._async.drop_snapshot(snapshot_id))

    def explain_lookup(
        self, topic: str, partition: int, *, offset: int | None = None, timestamp_ms: int | None = None
    ) -> pb.ExplainLookupResponse:
        return self._portal.run(
            self._async.explain_lookup(topic, partition, offset=offset, timestamp_ms=timestamp_ms)
        )

    def metadata(self, topics: Sequence[str] = ()) -> ClusterMetadata:
        return self._portal.run(self._async.metadata(topics))

    def move_partition(self, topic: str, partition: int, to: str, *, from_instance: str | None = None,
                       timeout_s: float = _moves.MOVE_TIMEOUT_S_DEFAULT) -> _moves.PartitionMove:
        return self._portal.run(self._async.move_partition(topic, partition, to, from_instance=from_instance,
                                                           timeout_s=timeout_s))

    def abort_move(self, topic: str, partition: int) -> bool:
        return self._portal.run(self._async.abort_move(topic, partition))

    def take_over_partition(self, topic: str, partition: int, *, unclean: bool = False) -> _moves.PartitionTakeover:
        return self._portal.run(self._async.take_over_partition(topic, partition, unclean=unclean))

    def cluster_status(self) -> _moves.ClusterStatus:
        return self._portal.run(self._async.cluster_status())
