"""The transport: one ``grpc.aio`` channel to a seglog service, and nothing else.

``Transport`` owns the channel and the generated stub, puts a deadline on every call, and is the
single place where gRPC errors leave gRPC: every call runs inside
``errors.translate_rpc_errors()``. Producer, Consumer and Admin hold a ``Transport`` and speak
protobuf messages through it; nothing above this module imports ``grpc`` for calls.

Given a bootstrap list (``server="a:1,b:2"``), the transport dials the first reachable address
before its first call (``ready``); with one address nothing is probed and the channel connects on
the first call as before.

A ``Transport`` must be created and used on one running event loop (a grpc.aio rule); the
synchronous clients run theirs on the private loop thread of ``seglog._sync``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncio

import grpc
import grpc.aio

from seglog._security import ConnectionSecurity
from seglog._streams import RequestStream
from seglog.errors import (
    ClientClosedError,
    SeglogError,
    ServiceError,
    ServiceUnavailableError,
    translate_rpc_errors,
)
from seglog.v1 import cluster_pb2 as cluster_pb
from seglog.v1 import cluster_pb2_grpc as cluster_pb_grpc
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog.v1 import moves_pb2_grpc as moves_pb_grpc

__all__ = ["MESSAGE_BYTES_MAX", "REQUEST_TIMEOUT_MS_DEFAULT", "Transport", "TransportStatistics"]

# gRPC's default receive limit is 4 MiB, below what one Fetch may return when a consumer asks for
# many batches or a single batch is large; 64 MiB bounds memory per message and matches the limit
# the service is expected to run with (a larger server message would fail with RESOURCE_EXHAUSTED).
MESSAGE_BYTES_MAX = 64 * 1024 * 1024
# Deadline for a request that does not wait on purpose (admin calls, Produce). Long polls add
# their own wait on top. 30 s is Kafka's request.timeout.ms default.
REQUEST_TIMEOUT_MS_DEFAULT = 30_000

# How long one bootstrap address may take to connect before the next is tried. A refused or
# unroutable address fails at once (TRANSIENT_FAILURE); this bounds one that does not answer at
# all (a paused process, a dropped SYN). 5 s is well above a loopback or LAN handshake with TLS
# and keeps a list of three dead addresses under the default request timeout.
BOOTSTRAP_CONNECT_TIMEOUT_MS = 5_000

_Response = TypeVar("_Response")


@dataclass(frozen=True)
class TransportStatistics:
    server: str
    requests_sent: int
    requests_failed: int
    streams_opened: int
    closed: bool


class Transport:
    """A channel to one seglog service with deadlines and translated errors."""

    def __init__(
        self,
        server: str,
        *,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        security: ConnectionSecurity | None = None,
        bootstrap: Sequence[str] = (),
    ) -> None:
        """``credentials`` (ready gRPC credentials) wins over ``security``'s TLS settings; the
        token of ``security`` is sent with every call either way. ``bootstrap``: the addresses to
        try in order, ``server`` first, when there are several (``ready``)."""
        security = security or ConnectionSecurity()
        if credentials is None:
            credentials = security.channel_credentials()
        self._metadata = security.call_metadata()
        if not server or not isinstance(server, str):
            raise ValueError(f"server must be 'host:port', got {server!r}")
        if request_timeout_ms <= 0:
            raise ValueError(f"request_timeout_ms must be > 0, got {request_timeout_ms}")
        self._credentials = credentials
        self._channel_options = [
            ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
            ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
            *channel_options,
        ]
        self._use_channel(self._open_channel(server), server)
        # Several addresses: the first reachable one is chosen before the first call.
        self._bootstrap = tuple(bootstrap) if len(bootstrap) > 1 else ()
        self.choosing = bool(self._bootstrap)
        self._choose_lock: asyncio.Lock | None = None
        self._request_timeout_s = request_timeout_ms / 1000
        self._requests_sent = 0
        self._requests_failed = 0
        self._streams_opened = 0
        self._closed = False
        self._produce_stream: RequestStream | None = None
        self._lookup_stream: RequestStream | None = None
        self._lookup_streaming: bool | None = None  # None: not tried yet

    def _open_channel(self, server: str) -> grpc.aio.Channel:
        if self._credentials is None:
            return grpc.aio.insecure_channel(server, options=self._channel_options)
        return grpc.aio.secure_channel(server, self._credentials, options=self._channel_options)

    def _use_channel(self, channel: grpc.aio.Channel, server: str) -> None:
        self._channel = channel
        self._stub = pb_grpc.LogServiceStub(channel)  # type: ignore[no-untyped-call]
        self._cluster_stub = cluster_pb_grpc.ClusterServiceStub(channel)  # type: ignore[no-untyped-call]
        self._moves_stub = moves_pb_grpc.PartitionMoveServiceStub(channel)  # type: ignore[no-untyped-call]
        self._server = server

    @property
    def server(self) -> str:
        """The address this transport talks to (of a bootstrap list, the one chosen)."""
        return self._server

    async def ready(self) -> None:
        """With a bootstrap list, connect to the first reachable address (once; again on the next
        call while none is). ServiceUnavailableError naming every address when none answers.
        Nothing to do with one address: the channel connects on its first call."""
        if not self.choosing:
            return
        if self._choose_lock is None:
            self._choose_lock = asyncio.Lock()
        async with self._choose_lock:
            if self.choosing:
                await self._choose_reachable()

    async def _choose_reachable(self) -> None:
        self._check_open()
        timeout_s = min(BOOTSTRAP_CONNECT_TIMEOUT_MS / 1000, self._request_timeout_s)
        for address in self._bootstrap:
            channel = self._channel if address == self._server else self._open_channel(address)
            if await _connects(channel, timeout_s):
                if channel is not self._channel:
                    old = self._channel
                    self._use_channel(channel, address)
                    await old.close(grace=None)
                self.choosing = False
                return
            if channel is not self._channel:
                await channel.close(grace=None)
        raise ServiceUnavailableError(
            f"none of the bootstrap addresses {', '.join(self._bootstrap)} could be connected to "
            f"(each tried for up to {timeout_s:g} s)"
        )

    @property
    def request_timeout_ms(self) -> int:
        return round(self._request_timeout_s * 1000)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            for stream in (self._produce_stream, self._lookup_stream):
                if stream is not None:
                    await stream.close()
            await self._channel.close(grace=None)

    def statistics(self) -> TransportStatistics:
        return TransportStatistics(
            server=self._server,
            requests_sent=self._requests_sent,
            requests_failed=self._requests_failed,
            streams_opened=self._streams_opened,
            closed=self._closed,
        )

    # -- unary RPCs ------------------------------------------------------------------------------

    async def create_topic(self, request: pb.CreateTopicRequest) -> pb.CreateTopicResponse:
        response: pb.CreateTopicResponse = await self._unary("CreateTopic", request)
        return response

    async def delete_topic(self, request: pb.DeleteTopicRequest) -> pb.DeleteTopicResponse:
        response: pb.DeleteTopicResponse = await self._unary("DeleteTopic", request)
        return response

    async def list_topics(self, request: pb.ListTopicsRequest) -> pb.ListTopicsResponse:
        response: pb.ListTopicsResponse = await self._unary("ListTopics", request)
        return response

    async def describe_topic(self, request: pb.DescribeTopicRequest) -> pb.DescribeTopicResponse:
        response: pb.DescribeTopicResponse = await self._unary("DescribeTopic", request)
        return response

    async def alter_topic_configs(self, request: pb.AlterTopicConfigsRequest) -> pb.AlterTopicConfigsResponse:
        response: pb.AlterTopicConfigsResponse = await self._unary("AlterTopicConfigs", request)
        return response

    async def produce(self, request: pb.ProduceRequest) -> pb.ProduceResponse:
        response: pb.ProduceResponse = await self._unary("Produce", request)
        return response

    async def fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        # A long poll waits up to max_wait_ms on purpose; the deadline covers that plus the usual.
        response: pb.FetchResponse = await self._unary("Fetch", request, extra_ms=request.max_wait_ms)
        return response

    async def offsets_for_times(
        self, request: pb.OffsetsForTimesRequest, message: pb.LookupStreamRequest | None = None
    ) -> pb.OffsetsForTimesResponse:
        """On the connection's LookupStream (a request on an open stream costs about half an
        empty unary call), or the unary OffsetsForTimes on a service without it. ``message``:
        the stream's message holding ``request`` already (else one is built around a copy)."""
        if self.choosing:
            await self.ready()
        if self._lookup_streaming is not False:
            self._check_open()
            self._requests_sent += 1
            try:
                if message is None:
                    message = pb.LookupStreamRequest()
                    message.offsets_for_times.CopyFrom(request)
                # The stream once opened (open checked above): no second call to look it up.
                stream = self._lookup_stream or self.lookup_stream()
                response: pb.OffsetsForTimesResponse = await stream.ask(message, self._request_timeout_s)
            except ServiceError as error:
                if error.code is not grpc.StatusCode.UNIMPLEMENTED:
                    self._requests_failed += 1
                    raise
                self._lookup_streaming = False  # an older service: unary from now on
            except SeglogError:
                self._requests_failed += 1
                raise
            else:
                self._lookup_streaming = True
                return response
        response = await self._unary("OffsetsForTimes", request)
        return response

    async def delete_records(self, request: pb.DeleteRecordsRequest) -> pb.DeleteRecordsResponse:
        response: pb.DeleteRecordsResponse = await self._unary("DeleteRecords", request)
        return response

    async def list_cleanable(self, request: pb.ListCleanableRequest) -> pb.ListCleanableResponse:
        response: pb.ListCleanableResponse = await self._unary("ListCleanable", request)
        return response

    async def create_snapshot(self, request: pb.CreateSnapshotRequest) -> pb.CreateSnapshotResponse:
        response: pb.CreateSnapshotResponse = await self._unary("CreateSnapshot", request)
        return response

    async def commit_cleaned(self, request: pb.CommitCleanedRequest) -> pb.CommitCleanedResponse:
        response: pb.CommitCleanedResponse = await self._unary("CommitCleaned", request)
        return response

    async def drop_snapshot(self, request: pb.DropSnapshotRequest) -> pb.DropSnapshotResponse:
        response: pb.DropSnapshotResponse = await self._unary("DropSnapshot", request)
        return response

    async def explain_lookup(self, request: pb.ExplainLookupRequest) -> pb.ExplainLookupResponse:
        response: pb.ExplainLookupResponse = await self._unary("ExplainLookup", request)
        return response

    async def commit_offsets(self, request: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
        response: pb.CommitOffsetsResponse = await self._unary("CommitOffsets", request)
        return response

    async def fetch_offsets(self, request: pb.FetchOffsetsRequest) -> pb.FetchOffsetsResponse:
        response: pb.FetchOffsetsResponse = await self._unary("FetchOffsets", request)
        return response

    async def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        response: pb.HeartbeatResponse = await self._unary("Heartbeat", request)
        return response

    async def list_groups(self, request: pb.ListGroupsRequest) -> pb.ListGroupsResponse:
        response: pb.ListGroupsResponse = await self._unary("ListGroups", request)
        return response

    async def describe_group(self, request: pb.DescribeGroupRequest) -> pb.DescribeGroupResponse:
        response: pb.DescribeGroupResponse = await self._unary("DescribeGroup", request)
        return response

    async def init_producer_id(self, request: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
        response: pb.InitProducerIdResponse = await self._unary("InitProducerId", request)
        return response

    async def metadata(self, request: cluster_pb.MetadataRequest) -> cluster_pb.MetadataResponse:
        """ClusterService.Metadata: the instances and each partition's owner."""
        response: cluster_pb.MetadataResponse = await self._unary("Metadata", request, cluster=True)
        return response

    async def partition_moves(self, method: str, request: Any, timeout_s: float) -> Any:
        """PartitionMoveService.<method> (moves.proto: moves, takeovers, the cluster's status;
        _moves.py). A move copies a whole partition: its deadline is ``timeout_s`` when that is
        longer than the request timeout."""
        extra_ms = max(0, round(timeout_s * 1000) - self.request_timeout_ms)
        return await self._unary(method, request, extra_ms=extra_ms, stub=self._moves_stub)

    # -- streaming -------------------------------------------------------------------------------

    async def consume(self, request: pb.ConsumeRequest) -> AsyncIterator[pb.FetchResponse]:
        """Responses of a Consume stream until the caller stops iterating (which cancels it)."""
        if self.choosing:
            await self.ready()
        self._check_open()
        self._streams_opened += 1
        call = self._stub.Consume(request, metadata=self._metadata)  # no deadline: a tail stream lives until cancelled
        try:
            with translate_rpc_errors():
                async for response in call:
                    yield response
        finally:
            call.cancel()

    def produce_stream(self) -> RequestStream:
        """The connection's ProduceStream (opened on its first request, reopened after it
        ends): ``send(ProduceStreamRequest)`` -> future of its ProduceResponse, answers in order."""
        self._check_open()
        if self._produce_stream is None:
            self._produce_stream = RequestStream(
                lambda: self._stream_call(self._stub.ProduceStream),
                "produce",
                open_timeout_s=self.request_timeout_s,
            )
        return self._produce_stream

    def lookup_stream(self) -> RequestStream:
        """The connection's LookupStream: ``request(LookupStreamRequest)`` -> its
        OffsetsForTimesResponse."""
        self._check_open()
        if self._lookup_stream is None:
            self._lookup_stream = RequestStream(
                lambda: self._stream_call(self._stub.LookupStream),
                "offsets_for_times",
                open_timeout_s=self.request_timeout_s,
                caller_reads=True,  # a lookup's caller waits for its answer: it reads it itself
            )
        return self._lookup_stream

    @property
    def request_timeout_s(self) -> float:
        return self._request_timeout_s

    # -- helpers ---------------------------------------------------------------------------------

    def _stream_call(self, rpc: Any) -> Any:
        self._streams_opened += 1
        return rpc(metadata=self._metadata)  # no deadline: it lives until closed; requests have theirs

    async def _unary(self, method: str, request: Any, *, extra_ms: int = 0, cluster: bool = False,
                     stub: Any = None) -> Any:
        if self.choosing:  # a bootstrap list not yet connected
            await self.ready()
        self._check_open()
        rpc = getattr(stub or (self._cluster_stub if cluster else self._stub), method)
        self._requests_sent += 1
        try:
            with translate_rpc_errors():
                return await rpc(
                    request, timeout=self._request_timeout_s + extra_ms / 1000, metadata=self._metadata
                )
        except SeglogError:
            self._requests_failed += 1
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError(f"the connection to {self._server} is closed")


async def _connects(channel: grpc.aio.Channel, timeout_s: float) -> bool:
    """Whether ``channel`` reaches READY within ``timeout_s``; False at its first failure."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    state = channel.get_state(try_to_connect=True)
    while state is not grpc.ChannelConnectivity.READY:
        remaining = deadline - loop.time()
        if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN) or remaining <= 0:
            return False
        try:
            await asyncio.wait_for(channel.wait_for_state_change(state), remaining)
        except TimeoutError:
            return False
        state = channel.get_state(try_to_connect=True)
    return True
