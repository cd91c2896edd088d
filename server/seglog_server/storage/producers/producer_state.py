"""Idempotent producers' state on one partition (Kafka's ProducerStateManager, ProducerAppendInfo
and ProducerStateEntry, without transactions).

A producer that set a producer id (from InitProducerId) numbers its batches per partition: the
first record of a batch carries ``baseSequence``, the next batch starts where it ended. For each
producer id the partition remembers its epoch, its last activity and the metadata of its last
``BATCHES_RETAINED`` batches (sequence range, last offset, timestamp). Before a batch is given
offsets (under the log's lock) ``check`` applies Kafka's rules, in Kafka's order:

1. a transactional batch is refused (TransactionsNotSupportedError): seglog has no coordinator;
2. an epoch below the producer's is fenced (InvalidProducerEpochError);
3. a batch with exactly the sequence range of one of the retained batches, same epoch, is a
   duplicate (a retry of a batch already written): nothing is appended and the caller answers
   with the original offsets;
4. a new epoch must start at sequence 0; within the epoch the first sequence must follow the
   last one (``last + 1``, wrapping after 2**31 - 1 to 0); else OutOfOrderSequenceError.
   A producer id the partition does not know at all may start anywhere (Kafka since KIP-360:
   its state may have expired or been removed with old segments, and refusing it would wedge
   the producer for good; every sequence after that is checked).

Batches without a producer id (-1) are not looked at. The state is a cache of the log: it is
rebuilt by replaying batch headers (``replay``) after the newest valid snapshot
(``producer_state_loader.py``); the I/O lives there, this module is pure.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from ..base.errors import InvalidProducerEpochError, OutOfOrderSequenceError, TransactionsNotSupportedError
from .producer_snapshot import SnapshotEntry

__all__ = [
    "BATCHES_RETAINED",
    "BatchMetadata",
    "PendingAppend",
    "ProducerFields",
    "ProducerStateEntry",
    "ProducerStateManager",
    "ProducerStateStatistics",
    "decrement_sequence",
    "increment_sequence",
    "producer_fields",
]

# Kafka's NUM_BATCHES_TO_RETAIN: the producer's max.in.flight.requests.per.connection is at most
# 5 with idempotence, so a retry is always of one of the last five batches of its partition.
BATCHES_RETAINED = 5
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SEQUENCE_MAX = 2**31 - 1  # sequences wrap to 0 after int32 max

# Batch header bytes 21..57: attributes .. baseSequence (seglog.records.header's layout).
_PRODUCER_PART = struct.Struct(
    ">"
    "h"  # 21 attributes
    "i"  # 23 lastOffsetDelta
    "q"  # 27 baseTimestamp
    "q"  # 35 maxTimestamp
    "q"  # 43 producerId
    "h"  # 51 producerEpoch
    "i"  # 53 baseSequence
)
_PRODUCER_PART_OFFSET = 21
_TRANSACTIONAL_BIT = 0x10
assert _PRODUCER_PART_OFFSET + _PRODUCER_PART.size == 57


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps past int32 max to 0."""
    if sequence > SEQUENCE_MAX - increment:
        return increment - (SEQUENCE_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return SEQUENCE_MAX - (decrement - sequence) + 1
    return sequence - decrement


class ProducerFields(NamedTuple):
    """The producer part of a batch header."""

    producer_id: int
    epoch: int
    first_sequence: int
    last_sequence: int
    transactional: bool
    last_offset_delta: int


def producer_fields(batch: bytes | bytearray | memoryview) -> ProducerFields:
    attributes, last_delta, _, _, producer_id, epoch, base_sequence = _PRODUCER_PART.unpack_from(
        batch, _PRODUCER_PART_OFFSET
    )
    last_sequence = increment_sequence(base_sequence, last_delta) if base_sequence >= 0 else NO_SEQUENCE
    return ProducerFields(
        producer_id, epoch, base_sequence, last_sequence, bool(attributes & _TRANSACTIONAL_BIT), last_delta
    )


class BatchMetadata(NamedTuple):
    """One written batch of a producer (Kafka's BatchMetadata). A NamedTuple: one is built per
    idempotent append, and a frozen dataclass costs several times more to construct."""

    last_sequence: int
    last_offset: int
    offset_delta: int  # last offset - first offset (= last sequence - first sequence)
    timestamp_ms: int  # the batch's max timestamp as stored

    @property
    def first_sequence(self) -> int:
        return decrement_sequence(self.last_sequence, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """One producer id on one partition: its epoch, last activity and last batches."""

    __slots__ = ("producer_id", "epoch", "last_timestamp_ms", "batches")
    # last_timestamp_ms: the service's time of the producer's last batch (what expiry measures;
    # the snapshot's Timestamp field).

    def __init__(self, producer_id: int, epoch: int = NO_PRODUCER_EPOCH, last_timestamp_ms: int = -1) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.last_timestamp_ms = last_timestamp_ms
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_RETAINED)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def to_snapshot(self) -> SnapshotEntry:
        if self.batches:
            last = self.batches[-1]
            return SnapshotEntry(
                self.producer_id, self.epoch, last.last_sequence, last.last_offset, last.offset_delta,
                self.last_timestamp_ms,
            )
        return SnapshotEntry(self.producer_id, self.epoch, NO_SEQUENCE, -1, 0, self.last_timestamp_ms)

    @classmethod
    def from_snapshot(cls, entry: SnapshotEntry) -> ProducerStateEntry:
        state = cls(entry.producer_id, entry.epoch, entry.timestamp_ms)
        if entry.last_offset >= 0:
            state.batches.append(
                BatchMetadata(entry.last_sequence, entry.last_offset, entry.offset_delta, entry.timestamp_ms)
            )
        return state

    def __repr__(self) -> str:
        return f"ProducerStateEntry(id={self.producer_id}, epoch={self.epoch}, batches={list(self.batches)})"


class PendingAppend(NamedTuple):
    """A batch that passed ``check``: ``complete`` records it once it has offsets."""

    producer_id: int
    epoch: int
    last_sequence: int


@dataclass(frozen=True)
class ProducerStateStatistics:
    producer_count: int
    duplicate_count: int  # retried batches answered with their original offsets
    out_of_order_count: int
    fenced_count: int
    expired_count: int


class ProducerStateManager:
    """The producers of one partition (in memory; snapshots are written by the loader module).

    Not thread-safe: the Log calls it under its own lock."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._producers: dict[int, ProducerStateEntry] = {}
        # The offset up to which (exclusive) every batch has been applied.
        self.map_end_offset = 0
        # The offsets of the snapshot files on disk, ascending (Kafka's ``snapshots`` map): kept
        # here so a roll needs no directory listing (producer_state_loader.py maintains it).
        self.snapshot_offsets: list[int] = []
        self._duplicate_count = 0
        self._out_of_order_count = 0
        self._fenced_count = 0
        self._expired_count = 0

    # -- the append path ---------------------------------------------------------------------
    def check(self, batch: bytes | bytearray | memoryview) -> PendingAppend | BatchMetadata | None:
        """None for a batch without a producer id; the retained BatchMetadata for a duplicate;
        else a PendingAppend to ``complete`` after the write. Raises when a rule refuses it.

        On every produce, so written flat: one header read, the rules inline, the messages in
        cold helpers."""
        attributes, last_delta, _, _, producer_id, epoch, first = _PRODUCER_PART.unpack_from(batch, _PRODUCER_PART_OFFSET)
        if attributes & _TRANSACTIONAL_BIT:
            raise TransactionsNotSupportedError(
                f"{self._name}: transactional batches are not supported (producer id "
                f"{producer_id}): seglog has no transactions yet; send non-transactional batches"
            )
        if producer_id < 0:
            return None
        last = first + last_delta if first <= SEQUENCE_MAX - last_delta else increment_sequence(first, last_delta)
        entry = self._producers.get(producer_id)
        if entry is not None:
            if epoch == entry.epoch:
                batches = entry.batches
                for written in batches:  # the same last sequence and length: the same range
                    if written.last_sequence == last and written.offset_delta == last_delta:
                        self._duplicate_count += 1
                        return written
                previous = batches[-1].last_sequence if batches else NO_SEQUENCE
                if first != previous + 1 and not (first == 0 and previous == SEQUENCE_MAX):
                    raise self._out_of_order(producer_id, epoch, first, last, previous)
            elif epoch < entry.epoch:
                raise self._fenced(producer_id, epoch, entry.epoch)
            elif first != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise self._new_epoch_not_at_zero(producer_id, epoch, first)
        return PendingAppend(producer_id, epoch, last)

    def _out_of_order(self, producer_id: int, epoch: int, first: int, last: int, previous: int) -> OutOfOrderSequenceError:
        self._out_of_order_count += 1
        return OutOfOrderSequenceError(
            f"{self._name}: producer {producer_id} (epoch {epoch}) sent a batch with sequences "
            f"[{first}, {last}], expected the first to be "
            f"{increment_sequence(previous, 1) if previous >= 0 else 0} (after its last written "
            f"sequence {previous}): a batch before it is missing or was sent out of order"
        )

    def _fenced(self, producer_id: int, epoch: int, current: int) -> InvalidProducerEpochError:
        self._fenced_count += 1
        return InvalidProducerEpochError(
            f"{self._name}: producer {producer_id} sent epoch {epoch}, below its current epoch "
            f"{current}: this producer was fenced by a newer one"
        )

    def _new_epoch_not_at_zero(self, producer_id: int, epoch: int, first: int) -> OutOfOrderSequenceError:
        self._out_of_order_count += 1
        return OutOfOrderSequenceError(
            f"{self._name}: producer {producer_id} starts epoch {epoch} at sequence {first}; a new "
            f"epoch must start at sequence 0"
        )

    def complete(
        self, pending: PendingAppend, first_offset: int, last_offset: int, timestamp_ms: int, now_ms: int
    ) -> None:
        """Records the batch ``check`` passed, now written at [first_offset, last_offset] with
        max timestamp ``timestamp_ms``, at the service's time ``now_ms``."""
        producer_id, epoch, last_sequence = pending
        self._apply(producer_id, epoch, last_sequence, first_offset, last_offset, timestamp_ms, now_ms)
        self.map_end_offset = last_offset + 1

    def _apply(self, producer_id: int, epoch: int, last_sequence: int, first_offset: int, last_offset: int,
               timestamp_ms: int, activity_ms: int) -> None:
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        if epoch != entry.epoch:  # a new epoch forgets the old one's batches
            entry.batches.clear()
            entry.epoch = epoch
        entry.batches.append(BatchMetadata(last_sequence, last_offset, last_offset - first_offset, timestamp_ms))
        entry.last_timestamp_ms = activity_ms

    # -- rebuilding --------------------------------------------------------------------------
    def replay(self, fields: ProducerFields, base_offset: int, max_timestamp_ms: int, now_ms: int) -> None:
        """Applies a stored batch without judging it (Kafka's replication origin): the log is
        the truth, the state follows it. When the batch arrived is not stored, so its producer
        counts as active at ``now_ms`` (the load): expiry may come later, never sooner."""
        last_offset = base_offset + fields.last_offset_delta
        if fields.producer_id >= 0 and fields.first_sequence >= 0:
            self._apply(fields.producer_id, fields.epoch, fields.last_sequence, base_offset, last_offset,
                        max_timestamp_ms, now_ms)
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)

    def load(self, entries: list[SnapshotEntry], snapshot_offset: int, now_ms: int, expiration_ms: int) -> None:
        """Replaces the state with a snapshot's entries (expired ones left out, as Kafka does)."""
        self._producers = {
            entry.producer_id: ProducerStateEntry.from_snapshot(entry)
            for entry in entries
            if now_ms - entry.timestamp_ms < expiration_ms
        }
        self.map_end_offset = snapshot_offset

    def reset(self, offset: int) -> None:
        self._producers = {}
        self.map_end_offset = offset

    def last_offsets(self) -> dict[int, int]:
        """The last offset of each known producer's last batch: the batches a cleaning keeps
        (Kafka's ``lastRecordsOfActiveProducers``), so that this state can be rebuilt from the
        cleaned log."""
        return {pid: entry.batches[-1].last_offset for pid, entry in self._producers.items() if entry.batches}

    def snapshot_entries(self) -> list[SnapshotEntry]:
        return [self._producers[pid].to_snapshot() for pid in sorted(self._producers)]

    # -- expiry and introspection ----------------------------------------------------------------
    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forgets producers idle for ``expiration_ms`` or longer (producer.id.expiration.ms).
        Idle by the service's clock: Kafka measures from the batch's max timestamp, which a
        producer sets (records stamped in 1970 would expire their producer at the next check,
        and a retry after that could be written twice); seglog from when the batch arrived."""
        expired = [pid for pid, entry in self._producers.items() if now_ms - entry.last_timestamp_ms >= expiration_ms]
        for pid in expired:
            del self._producers[pid]
        self._expired_count += len(expired)
        return len(expired)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def statistics(self) -> ProducerStateStatistics:
        return ProducerStateStatistics(
            producer_count=len(self._producers),
            duplicate_count=self._duplicate_count,
            out_of_order_count=self._out_of_order_count,
            fenced_count=self._fenced_count,
            expired_count=self._expired_count,
        )
