"""An idempotent producer's identity and sequence numbers (Kafka's TransactionManager, without
transactions).

The producer asks the service for a producer id (``InitProducerId``) before its first batch and
numbers each partition's records from 0: a batch carries the id, the epoch and the sequence of
its first record; the next batch of that partition starts where it ended. The sequence is given
once, when the batch is first sent, and retries resend the same bytes, so the service can tell a
retry from a new batch: a retry of a batch it already wrote is answered with the offsets it got
the first time, and nothing is written twice.

A batch that fails for good after it was given a sequence leaves a gap the service would refuse
in every later batch of its partition (OutOfOrderSequenceError). So such a failure retires the
producer id: the next batch asks for a new one and every partition starts again at 0 (nothing is
duplicated, the failed batch is reported to its sender as failed). So does a batch refused out
of order when every batch before it was written (``sequence_refused``: the service's state of
the id is not the producer's), which is sent again. As Kafka's producer does since KIP-360, the
sender then numbers the batches of that partition the service holds none of (refused out of
order past the gap, or never sent), in flight or queued, afresh on the new id in their order
(``renumbering``); one that may have been appended goes again first as it was, so the service
answers it as a duplicate or proves it unwritten.

A batch the service refused as too large was not written and leaves no gap: a split one's pieces carry its sequences (the sender's ``_split``), and a record
alone too large has the partition's later batches numbered down past it (``batch_unwritten``).
Until the id wrote to a partition the service takes its first batch there whatever its sequence,
so the sender keeps one batch of that partition in flight (``written_to``).

A service without the RPC (UNIMPLEMENTED: older than idempotent produce) gets plain batches: the
producer logs one warning and carries on without idempotence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc

from seglog.errors import SeglogError
from seglog.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from seglog.structs import TopicPartition
from seglog.v1 import log_service_pb2 as pb

__all__ = ["NO_PRODUCER_FIELDS", "Idempotence", "ProducerFields"]

_LOG = logging.getLogger("seglog.producer")

ProducerFields = tuple[int, int, int]  # (producer id, epoch, base sequence)
NO_PRODUCER_FIELDS: ProducerFields = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
# Sequences are int32 and wrap to 0 after this (Kafka's DefaultRecordBatch.incrementSequence).
SEQUENCE_MAX = 2**31 - 1


def next_sequence(sequence: int, record_count: int) -> int:
    if sequence > SEQUENCE_MAX - record_count:
        return record_count - (SEQUENCE_MAX - sequence) - 1
    return sequence + record_count


def earlier_sequence(sequence: int, record_count: int) -> int:
    """The sequence ``record_count`` records before ``sequence`` (``next_sequence`` undone)."""
    return (sequence - record_count) % (SEQUENCE_MAX + 1)


class Idempotence:
    """The hook the sender calls as it sends each batch for the first time."""

    def __init__(self, enabled: bool, init_producer_id: Callable[[pb.InitProducerIdRequest], Awaitable[pb.InitProducerIdResponse]]) -> None:
        self._enabled = enabled
        self._init_producer_id = init_producer_id
        self._producer_id = NO_PRODUCER_ID
        self._epoch = NO_PRODUCER_EPOCH
        self._sequences: dict[TopicPartition, int] = {}
        # Partitions that wrote a batch of the current producer id. Until then the service knows
        # nothing of the id there and takes its first batch whatever its sequence (as after the
        # id's state expired): a later batch could land first if the one before it is refused,
        # so the sender keeps one batch of such a partition in flight (``written_to``).
        self._written: set[TopicPartition] = set()
        self._lock: asyncio.Lock | None = None
        self.producer_ids_received = 0

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def producer_id(self) -> int:
        return self._producer_id

    async def fields_for(self, topic_partition: TopicPartition, record_count: int) -> ProducerFields:
        """(producer id, epoch, first sequence) for a new batch of ``record_count`` records.
        Called in the order batches are sent, so each partition's sequences follow that order."""
        if not self._enabled:
            return NO_PRODUCER_FIELDS
        if self._producer_id == NO_PRODUCER_ID:
            await self._ensure_producer_id()
            if not self._enabled:
                return NO_PRODUCER_FIELDS
        sequence = self._sequences.get(topic_partition, 0)
        self._sequences[topic_partition] = next_sequence(sequence, record_count)
        return self._producer_id, self._epoch, sequence

    @property
    def needs_producer_id(self) -> bool:
        """True while enabled with no producer id: ``ensure_producer_id`` before ``fields_now``."""
        return self._enabled and self._producer_id == NO_PRODUCER_ID

    async def ensure_producer_id(self) -> None:
        if self.needs_producer_id:
            await self._ensure_producer_id()

    def fields_now(self, topic_partition: TopicPartition, record_count: int) -> ProducerFields:
        """``fields_for`` for a sender that waited for ``ensure_producer_id`` first (no await
        between the two, so no batch of the same partition can come in between)."""
        if not self._enabled:
            return NO_PRODUCER_FIELDS
        if self._producer_id == NO_PRODUCER_ID:
            raise RuntimeError("fields_now before ensure_producer_id")
        sequence = self._sequences.get(topic_partition, 0)
        self._sequences[topic_partition] = next_sequence(sequence, record_count)
        return self._producer_id, self._epoch, sequence

    def batch_failed(self, fields: ProducerFields) -> None:
        """A batch that carried ``fields`` failed for good: its sequences left a gap, so the
        producer id is retired (the next batch gets a new one and starts at 0)."""
        if fields[0] != NO_PRODUCER_ID and fields[0] == self._producer_id:
            _LOG.info("producer id %d retired after a failed batch; the next batch gets a new one", fields[0])
            self._retire()

    def _retire(self) -> None:
        self._producer_id = NO_PRODUCER_ID
        self._epoch = NO_PRODUCER_EPOCH
        self._sequences.clear()
        self._written.clear()

    def sequence_refused(self, fields: ProducerFields) -> None:
        """The service refused a batch that carried ``fields`` as out of order while every batch
        of its partition before it was written: its sequence cannot be resolved (the service's
        state of the id is not the producer's), so the id is retired, as after a failed batch;
        the sender numbers the batch and those after it afresh on a new one (Kafka since
        KIP-360 bumps the epoch and starts the partition's sequences again at 0)."""
        if fields[0] != NO_PRODUCER_ID and fields[0] == self._producer_id:
            _LOG.info("producer id %d retired after an out-of-order sequence; the next batch gets a new one", fields[0])
            self._retire()

    def renumbering(self, topic_partition: TopicPartition, given_back: int) -> None:
        """The sender numbers the partition's batches it holds unsent afresh, in order, with
        ``fields_now``: the ``given_back`` records of them that carry the current id were the
        last given on the partition, so its next sequence goes back past them first."""
        if given_back and topic_partition in self._sequences:
            self._sequences[topic_partition] = earlier_sequence(self._sequences[topic_partition], given_back)

    def batch_written(self, topic_partition: TopicPartition, fields: ProducerFields) -> None:
        """The service wrote a batch that carried ``fields`` on ``topic_partition``."""
        if fields[0] != NO_PRODUCER_ID and fields[0] == self._producer_id:
            self._written.add(topic_partition)

    def written_to(self, topic_partition: TopicPartition) -> bool:
        """Whether the service holds the current producer id's sequence on the partition (always
        True without idempotence): only then may several of its batches be in flight."""
        return not self._enabled or topic_partition in self._written

    def batch_unwritten(self, topic_partition: TopicPartition, fields: ProducerFields, record_count: int) -> None:
        """A batch that carried ``fields`` failed for good and the service wrote none of it (it
        refused it as too large): no gap is left if the partition's later batches are numbered
        ``record_count`` lower (the sender renumbers those it holds), as Kafka's
        ``adjustSequencesDueToFailedBatch`` does; the producer id stays."""
        if fields[0] != NO_PRODUCER_ID and fields[0] == self._producer_id and topic_partition in self._sequences:
            self._sequences[topic_partition] = earlier_sequence(self._sequences[topic_partition], record_count)

    async def _ensure_producer_id(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # FIFO: batches waiting here keep the order they were sent in
            if self._producer_id != NO_PRODUCER_ID or not self._enabled:
                return
            try:
                response = await self._init_producer_id(pb.InitProducerIdRequest())
            except SeglogError as error:
                if error.code is grpc.StatusCode.UNIMPLEMENTED:
                    _LOG.warning(
                        "the service has no InitProducerId (it predates idempotent produce): "
                        "sending without idempotence, so a retried batch may be written twice"
                    )
                    self._enabled = False
                    return
                raise
            self._producer_id = response.producer_id
            self._epoch = response.producer_epoch
            self._sequences.clear()
            self._written.clear()
            self.producer_ids_received += 1
