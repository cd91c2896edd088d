"""The consumer-group RPCs of seglog.v1.LogService: CommitOffsets, FetchOffsets and Heartbeat,
and the operators' ListGroups, DescribeGroup and DeleteGroup (offsets are reset by CommitOffsets
without a member id, which a group with members refuses, as Kafka's AlterConsumerGroupOffsets).

Each is convert -> one call of the group coordinator (groups/coordinator.py) on the pool (a
commit appends to __consumer_offsets; the coordinator's lock may be held by one) -> convert. A
commit answers only once its records are fsynced (core.durable: the group commit of fsynced
produces, one flush shared by the commits waiting on a partition). The
coordinator's errors reach the boundary and answer through status.py's table. A servicer built
without a coordinator (unit tests of other families) answers UNAVAILABLE, as Kafka's
COORDINATOR_NOT_AVAILABLE.

In cluster mode (``core.cluster`` set) a group is answered only by its coordinator, the owner of
its __consumer_offsets partition (group_routing.py): elsewhere the call is refused with the
owner's hint, as a partition request is. ``_at_coordinator`` runs each call between the routing's
``before`` and ``after`` (a commit's ``after`` once it is durable), so nothing is acknowledged by
an instance that lost the partition meanwhile. ListGroups lists the groups this instance
coordinates; a client asks every instance and merges (Kafka's admin does the same).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable, Set
from typing import Any, TypeVar

from seglog.v1 import log_service_pb2 as pb
from seglog_server.groups.coordinator import GroupCoordinator, OffsetCommit
from seglog_server.security import Operation, PermissionDeniedError

from . import validation
from .boundary import unary_rpc
from .call_gate import current_call
from .errors import CoordinatorNotAvailableError
from .group_routing import GroupRouting
from .service_core import ServiceCore

__all__ = ["GroupRpcs", "client_host"]

_NO_OFFSET = -1
_T = TypeVar("_T")


def client_host(context: Any) -> str:
    """The address a call came from as Kafka shows a member's host ("/" and the IP address, as
    Java's InetAddress prints it): from gRPC's peer ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000");
    another kind of peer (a unix socket) as gRPC names it; empty when unknown."""
    peer = context.peer() if context is not None and hasattr(context, "peer") else ""
    if not peer:
        return ""
    kind, _, address = urllib.parse.unquote(peer).partition(":")
    if kind == "ipv4":
        return "/" + address.rpartition(":")[0]
    if kind == "ipv6":
        return "/" + address.rpartition(":")[0].strip("[]")
    return peer


class GroupRpcs:
    def __init__(self, core: ServiceCore, coordinator: GroupCoordinator | None) -> None:
        self.core = core
        self._coordinator = coordinator
        self._routing: GroupRouting | None = None  # cluster mode, made on first use

    @property
    def coordinator_or_none(self) -> GroupCoordinator | None:
        return self._coordinator

    @property
    def coordinator(self) -> GroupCoordinator:
        """The coordinator every group RPC calls through (first thing, before any work)."""
        if self._coordinator is None:
            raise CoordinatorNotAvailableError("this service runs no group coordinator")
        return self._coordinator

    @property
    def routing(self) -> GroupRouting | None:
        """Cluster mode's coordinator routing; None in a single process."""
        if self._routing is None and self.core.cluster is not None and self._coordinator is not None:
            self._routing = GroupRouting(self.core.cluster, self._coordinator)
        return self._routing

    async def _at_coordinator(self, group: str, work: Callable[[], Awaitable[_T]], *, write: bool = False) -> _T:
        """``work()`` where this instance coordinates ``group`` (always in a single process)."""
        routing = self.routing
        if routing is None or not group:  # an empty group id: the coordinator's own refusal
            return await work()
        epoch = await self.core.calls.blocking(lambda: routing.before(group, write=write))
        try:
            answer = await work()
        except Exception:
            routing.after(group, epoch, write=write)  # lost meanwhile: the new owner's hint first
            raise
        routing.after(group, epoch, write=write)
        return answer

    @unary_rpc
    async def CommitOffsets(self, request: pb.CommitOffsetsRequest, context: Any) -> Any:
        coordinator = self.coordinator
        offsets = [
            OffsetCommit(*validation.check_partition_ref(o.topic, o.partition), o.offset, o.leader_epoch, o.metadata)
            for o in request.offsets
        ]

        async def commit() -> None:
            appended = await self.core.calls.blocking(
                coordinator.commit, request.group, request.member_id, request.member_epoch, offsets)
            if appended is not None:
                # Answered only once on disk: the offsets partition flushed up to the commit on the
                # pool, concurrent commits to one partition sharing a flush (group_commit.py).
                await self.core.durable(appended.log, appended.end_offset)

        await self._at_coordinator(request.group, commit, write=True)
        return pb.CommitOffsetsResponse()

    @unary_rpc
    async def FetchOffsets(self, request: pb.FetchOffsetsRequest, context: Any) -> Any:
        coordinator = self.coordinator
        partitions = [validation.check_partition_ref(p.topic, p.partition) for p in request.partitions] or None
        found = await self._at_coordinator(
            request.group, lambda: self.core.calls.blocking(coordinator.fetch, request.group, partitions))
        call = current_call()
        if partitions is None and call is not None:  # every partition: only the topics the caller may describe
            found = [entry for entry in found if call.may(Operation.DESCRIBE, entry[0][0])]
        return pb.FetchOffsetsResponse(offsets=[
            pb.CommittedOffset(topic=topic, partition=partition, offset=_NO_OFFSET, leader_epoch=-1)
            if value is None else
            pb.CommittedOffset(topic=topic, partition=partition, offset=value.offset,
                               leader_epoch=value.leader_epoch, metadata=value.metadata)
            for (topic, partition), value in found
        ])

    @unary_rpc
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> Any:
        coordinator = self.coordinator
        owned = {validation.check_partition_ref(p.topic, p.partition) for p in request.owned_partitions}

        async def beat() -> Any:
            answer = await self.core.calls.blocking(
                lambda: coordinator.heartbeat(
                    request.group, request.member_id, request.member_epoch,
                    subscription=set(request.subscribed_topics) or None, owned=owned,
                    instance_id=request.instance_id or None, rebalance_timeout_ms=request.rebalance_timeout_ms or None,
                    client_id=request.client_id, client_host=client_host(context)))
            if answer.written is not None:  # a change of membership answers once on disk, as a commit
                try:
                    await self.core.durable(answer.written.log, answer.written.end_offset)
                except Exception as exc:  # not durable: the groups it changed go back to what is (Kafka's revert)
                    await self.core.calls.blocking(coordinator.write_failed, answer.written, exc)
                    raise
                # Durable, but maybe put back meanwhile by an earlier write's failed flush (the
                # same group's, which this change was made on top of): that flush's error.
                coordinator.check_written(answer.written)
            return answer

        answer = await self._at_coordinator(request.group, beat, write=True)
        return pb.HeartbeatResponse(
            member_id=answer.member_id, member_epoch=answer.member_epoch,
            assignment=[pb.GroupPartition(topic=t, partition=p) for t, p in sorted(answer.assignment)],
            heartbeat_interval_ms=coordinator.heartbeat_interval_ms,
            session_timeout_ms=coordinator.session_timeout_ms,
        )

    @unary_rpc
    async def ListGroups(self, request: pb.ListGroupsRequest, context: Any) -> Any:
        listed = await self.core.calls.blocking(self.coordinator.list_group_states)
        routing = self.routing
        if routing is not None:  # the groups this instance coordinates; a client asks every instance
            listed = [entry for entry in listed if routing.coordinates(entry[0])]
        return pb.ListGroupsResponse(groups=[
            pb.ListedGroup(group=group, state=state, member_count=count) for group, state, count in listed])

    @unary_rpc
    async def DescribeGroup(self, request: pb.DescribeGroupRequest, context: Any) -> Any:
        coordinator = self.coordinator
        described = await self._at_coordinator(
            request.group, lambda: self.core.calls.blocking(coordinator.describe, request.group))
        call = current_call()

        def visible(topic: str) -> bool:
            return call is None or call.may(Operation.DESCRIBE, topic)

        owner = {tp: member for member, owned in described.members.items() for tp in owned}
        partitions = sorted(tp for tp in set(owner) | set(described.offsets) if visible(tp[0]))
        # Cluster mode: the ends of partitions owned here only; the others' lag is unknown (-1).
        owns = None if self.core.cluster is None else self.core.cluster.owns
        ends = await self.core.calls.blocking(coordinator.log_end_offsets, partitions, owns)
        rows = []
        for topic, partition in partitions:
            value = described.offsets.get((topic, partition))
            committed = value.offset if value is not None else _NO_OFFSET
            end = ends[(topic, partition)]
            rows.append(pb.GroupPartitionLag(
                topic=topic, partition=partition, committed_offset=committed,
                log_end_offset=_NO_OFFSET if end is None else end,
                lag=_NO_OFFSET if end is None or value is None else end - committed,  # Kafka: may be < 0
                member_id=owner.get((topic, partition), ""),
                metadata=value.metadata if value is not None else ""))
        return pb.DescribeGroupResponse(
            group=described.group, state=described.state, group_epoch=described.group_epoch,
            members=[
                pb.GroupMemberDescription(
                    member_id=member, member_epoch=described.member_epochs.get(member, 0),
                    subscribed_topics=sorted(described.subscriptions.get(member, ())),
                    owned_partitions=[pb.GroupPartition(topic=t, partition=p) for t, p in sorted(owned) if visible(t)],
                    instance_id=described.instance_ids.get(member, ""),
                    client_id=described.clients.get(member, ("", ""))[0],
                    host=described.clients.get(member, ("", ""))[1])
                for member, owned in sorted(described.members.items())
            ],
            partitions=rows,
        )

    @unary_rpc
    async def DeleteGroup(self, request: pb.DeleteGroupRequest, context: Any) -> Any:
        coordinator = self.coordinator
        call = current_call()

        def readable(topics: Set[str]) -> None:
            for topic in sorted(topics):
                if call is not None and not call.may(Operation.READ, topic):
                    raise PermissionDeniedError(call.principal, Operation.READ.value, topic)

        deleted = await self._at_coordinator(
            request.group, lambda: self.core.calls.blocking(coordinator.delete_group, request.group, readable),
            write=True)
        return pb.DeleteGroupResponse(deleted_offsets=deleted)
