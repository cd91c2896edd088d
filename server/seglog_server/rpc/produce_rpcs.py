"""Produce of seglog.v1.LogService, and the append ProduceStream shares (streams.py).

One storage call a request: the batch (as sent, or built from ``plain_records``) is appended,
inline when it is small and the storage says the append cannot block (no ``flush.messages``
fsync, no decompression to validate: ``StoragePort.append_may_block``), else on the pool. The
storage announces the append to the long polls itself. ``ACKS_FSYNCED`` then waits for group
commit (group_commit.py).
"""

from __future__ import annotations

import functools
from typing import Any

from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.base.errors import FencedLeaderEpochError

from . import conversions, validation
from .boundary import unary_rpc
from .errors import InvalidRequestError
from .service_core import BLOCKING, ServiceCore
from .storage_port import PartitionLog

__all__ = ["ProduceRpcs"]


class ProduceRpcs:
    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    @unary_rpc
    async def Produce(self, request: pb.ProduceRequest, context: Any) -> Any:
        log, info, acks = await self.append(request)
        if acks == pb.ACKS_FSYNCED:
            await self.core.durable(log, info.last_offset + 1)
        self.check_may_acknowledge(log)
        return conversions.produce_response(info)

    def check_may_acknowledge(self, log: Any = None) -> None:
        """Fencing again right before an OK: a produce admitted just before the fence may have
        waited (the append, ACKS_FSYNCED's group commit, a quota delay) past the deadline, when
        another instance could already own the partition. UNAVAILABLE then: the batch may be in the
        log, and the producer's retry (same id and sequence) is deduplicated by its owner."""
        if self.core.cluster is not None:
            if log is None:
                self.core.cluster.check_fence()
            else:  # and still this instance's, not fenced for a move since the append
                self.core.cluster.check_acknowledge(log.topic, log.partition)

    async def append(self, request: pb.ProduceRequest) -> tuple[PartitionLog, Any, int]:
        """Produce's append (ProduceStream's too): the log, the append's info and the acks."""
        core = self.core
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        core.check_user_may_change("produce to", topic)
        epoch = None
        if core.cluster is not None:  # fenced (lease) or not the owner: refused, never forwarded
            epoch = core.cluster.check_produce(topic, partition)
        acks = validation.check_acks(request.acks)
        batch = self._produced_batch(request)
        # From the header alone, before any record is decompressed or decoded (config.py).
        conversions.check_record_count(conversions.declared_record_count(batch), core.limits.batch_records_max)
        storage = core.storage
        log = storage.get_log(topic, partition)
        # An append that may fsync (flush.messages) or decompress to validate: never on the loop.
        io_bytes = BLOCKING if storage.append_may_block(log, batch) else len(batch)
        if epoch is None:
            info = await core.log_call(log, io_bytes, log.append, batch)
        else:  # cluster mode: the log refuses it once the partition's epoch moved past ``epoch``
            try:
                info = await core.log_call(log, io_bytes, functools.partial(log.append, leader_epoch=epoch), batch)
            except FencedLeaderEpochError as exc:
                raise core.cluster.fenced_append_error(topic, partition, exc) from exc
        if core.after_append.active:  # tests only: a fault between the write and the ack
            await core.after_append.after_append()
        return log, info, acks

    def _produced_batch(self, request: pb.ProduceRequest) -> bytes:
        if request.records:
            if len(request.plain_records):
                raise InvalidRequestError("set records or plain_records, not both")
            return request.records
        conversions.check_record_count(len(request.plain_records), self.core.limits.batch_records_max)
        compression = conversions.compression_from_proto(request.compression)
        return conversions.batch_from_plain_records(request.plain_records, compression)
