"""The admin RPCs of seglog.v1.LogService: CreateTopic, DeleteTopic, ListTopics, DescribeTopic,
AlterTopicConfigs, DeleteRecords and InitProducerId. Each is convert -> one storage call -> convert; topic creation,
deletion and producer-id blocks run on the pool (they create, rename and fsync files).
"""

from __future__ import annotations

from typing import Any

from seglog.v1 import log_service_pb2 as pb
from seglog_server.security import Operation

from . import conversions, validation
from .boundary import unary_rpc
from .call_gate import current_call
from .errors import InvalidRequestError
from .service_core import ServiceCore

__all__ = ["AdminRpcs"]


class AdminRpcs:
    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    @unary_rpc
    async def CreateTopic(self, request: pb.CreateTopicRequest, context: Any) -> Any:
        if not request.topic:
            raise InvalidRequestError("topic is empty")
        if request.partitions < 1:
            raise InvalidRequestError(f"partitions must be >= 1, found {request.partitions}")
        self.core.check_user_may_change("create", request.topic)
        configs = dict(request.configs)
        self._check_message_bytes(configs)
        core = self.core
        cluster = core.cluster
        if cluster is not None and cluster.topics is not None and not request.validate_only:
            # A local copy of a topic of that name deleted cluster-wide a moment ago goes first.
            await core.calls.blocking(cluster.topics.settle_topic, request.topic)
        config = await core.calls.blocking(
            core.storage.create_topic, request.topic, request.partitions, configs,
            validate_only=request.validate_only or cluster is not None,
        )
        if cluster is not None and not request.validate_only:
            # Checked here first (name, configs); then placed over the live instances in etcd, in
            # one transaction, and held locally; the other instances follow from their caches.
            await core.calls.blocking(cluster.create_topic, request.topic, request.partitions, configs)
        return conversions.create_topic_response(request.topic, request.partitions, config)

    @unary_rpc
    async def DeleteTopic(self, request: pb.DeleteTopicRequest, context: Any) -> Any:
        if not request.topic:
            raise InvalidRequestError("topic is empty")
        self.core.check_user_may_change("delete", request.topic)
        cluster = self.core.cluster
        if cluster is not None and cluster.topics is not None:
            # From etcd in one transaction; every instance deletes its copy as its cache sees it.
            await self.core.calls.blocking(cluster.topics.delete_topic, request.topic)
            return pb.DeleteTopicResponse()
        await self.core.calls.blocking(self.core.storage.delete_topic, request.topic)
        return pb.DeleteTopicResponse()

    @unary_rpc
    async def ListTopics(self, request: pb.ListTopicsRequest, context: Any) -> Any:
        internal = self.core.internal_topics
        topics = [entry for entry in self.core.storage.list_topics()
                  if request.include_internal or entry[0] not in internal]
        call = current_call()
        if call is not None:  # only what the caller may describe
            topics = [entry for entry in topics if call.may(Operation.DESCRIBE, entry[0])]
        return conversions.list_topics_response(topics, internal)

    @unary_rpc
    async def DescribeTopic(self, request: pb.DescribeTopicRequest, context: Any) -> Any:
        if not request.topic:
            raise InvalidRequestError("topic is empty")
        core = self.core
        description = await core.calls.blocking(core.storage.describe_topic, request.topic)
        response = conversions.describe_topic_response(description, core.log_dir_names.label)
        if core.cluster is not None:
            _describe_owners(core.cluster, response)
        return response

    @unary_rpc
    async def AlterTopicConfigs(self, request: pb.AlterTopicConfigsRequest, context: Any) -> Any:
        if not request.topic:
            raise InvalidRequestError("topic is empty")
        self.core.check_user_may_change("change the configs of", request.topic)
        set_configs, delete_configs = dict(request.set_configs), list(request.delete_configs)
        self._check_message_bytes(set_configs)
        core = self.core
        topics = core.cluster.topics if core.cluster is not None else None
        config = await core.calls.blocking(
            core.storage.alter_topic_configs, request.topic, set_configs, delete_configs,
            validate_only=request.validate_only or topics is not None,
        )
        if topics is not None and not request.validate_only:
            # Checked here first; then written to the topic's record in etcd (compared on its
            # revision) and applied here; the other instances apply it from their watch.
            config = await core.calls.blocking(topics.alter_topic_configs, request.topic, set_configs, delete_configs)
        return pb.AlterTopicConfigsResponse(topic=request.topic, configs=config.to_properties())

    @unary_rpc
    async def DeleteRecords(self, request: pb.DeleteRecordsRequest, context: Any) -> Any:
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        self.core.check_user_may_change("delete records of", topic)
        offset = request.offset
        if offset < validation.HIGH_WATERMARK_OFFSET:
            raise InvalidRequestError(f"offset must be >= 0 or -1 (high watermark), found {offset}")
        core = self.core
        log = core.storage.get_log(topic, partition)
        if offset == validation.HIGH_WATERMARK_OFFSET:
            offset = log.high_watermark
        log_start_offset = await core.log_call(log, 0, log.delete_records, offset)
        return pb.DeleteRecordsResponse(log_start_offset=log_start_offset)

    @unary_rpc
    async def InitProducerId(self, request: pb.InitProducerIdRequest, context: Any) -> Any:
        if request.transactional_id:
            raise InvalidRequestError(
                f"transactional_id {request.transactional_id!r}: seglog has no transactions yet; "
                "leave it empty for an idempotent producer"
            )
        producer_id, epoch = await self.core.calls.blocking(self.core.storage.init_producer_id)
        return pb.InitProducerIdResponse(producer_id=producer_id, producer_epoch=epoch)

    def _check_message_bytes(self, configs: dict[str, str]) -> None:
        """A topic's batches must fit one gRPC request; the storage does not know that limit."""
        text = configs.get("max.message.bytes")
        if text is None:
            return
        try:
            value = int(text)
        except ValueError:
            return  # the storage refuses it with a message naming the key and the value
        message_bytes_max = self.core.limits.message_bytes_max
        if value > message_bytes_max:
            raise InvalidRequestError(
                f"max.message.bytes {value} is above {message_bytes_max}, the "
                "largest batch a ProduceRequest can carry (request_bytes_max minus overhead)"
            )


def _describe_owners(cluster: Any, response: pb.DescribeTopicResponse) -> None:
    """Cluster mode: each partition's owner and epoch from the watched cache; a partition another
    instance owns says so, its offsets, sizes and segment counts (local and remote) -1 (the
    owner's to tell), never this instance's empty local copy. A partition etcd has no owner for is this instance's (epoch 0)."""
    for description in response.partitions:
        owner = cluster.partition_owner(response.topic, description.partition)
        if owner is None:
            description.owner_id, description.owner_address = cluster.instance_id, cluster.address
            continue
        description.owner_id, description.owner_address = owner.instance_id, owner.address
        description.owner_epoch = owner.epoch
        if owner.instance_id != cluster.instance_id:
            description.owned_elsewhere = True
            description.log_start_offset = description.log_end_offset = description.high_watermark = -1
            description.size_bytes = description.segment_count = -1
            description.local_log_start_offset = description.local_segment_count = description.local_size_bytes = -1
            description.remote_segment_count = description.remote_size_bytes = -1
            description.log_dir = ""
