"""The producer-state rules on one partition (ports of Kafka's ProducerStateManagerTest and the
idempotence cases of UnifiedLogTest), against the pure ProducerStateManager."""

from __future__ import annotations

import pytest
from tests.support.log_test_support import batch

from seglog_server.storage.base.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionsNotSupportedError,
)
from seglog_server.storage.producers.producer_state import (
    BATCHES_RETAINED,
    SEQUENCE_MAX,
    BatchMetadata,
    PendingAppend,
    ProducerStateManager,
    decrement_sequence,
    increment_sequence,
    producer_fields,
)

PID = 1000


class Partition:
    """A ProducerStateManager driven as the Log drives it, with offsets assigned in order."""

    def __init__(self) -> None:
        self.state = ProducerStateManager("t-0")
        self.end_offset = 0

    def append(self, epoch: int, sequence: int, count: int = 1, pid: int = PID, **kwargs) -> tuple[int, int]:
        data = batch(*([b"v"] * count), producer_id=pid, producer_epoch=epoch, base_sequence=sequence, **kwargs)
        result = self.state.check(data)
        if isinstance(result, BatchMetadata):
            return result.first_offset, result.last_offset
        first, last = self.end_offset, self.end_offset + count - 1
        if isinstance(result, PendingAppend):
            self.state.complete(result, first, last, 5, 5)
        self.end_offset = last + 1
        return first, last


def test_sequences_wrap_like_kafkas_default_record_batch():
    assert increment_sequence(SEQUENCE_MAX, 1) == 0
    assert increment_sequence(SEQUENCE_MAX - 1, 3) == 1
    assert decrement_sequence(1, 3) == SEQUENCE_MAX - 1
    assert decrement_sequence(5, 2) == 3


def test_producer_fields_read_the_header():
    fields = producer_fields(batch(b"a", b"b", b"c", producer_id=PID, producer_epoch=2, base_sequence=7))
    assert (fields.producer_id, fields.epoch, fields.first_sequence, fields.last_sequence) == (PID, 2, 7, 9)
    assert not fields.transactional


def test_batches_without_a_producer_id_are_not_tracked():
    partition = Partition()
    assert partition.state.check(batch(b"a")) is None
    assert partition.state.statistics().producer_count == 0


def test_basic_id_mapping_accepts_consecutive_sequences():
    partition = Partition()
    assert partition.append(0, 0) == (0, 0)
    assert partition.append(0, 1, count=3) == (1, 3)
    assert partition.state.entry(PID).last_sequence == 3


def test_a_gap_in_the_sequence_is_out_of_order():
    partition = Partition()
    partition.append(0, 0)
    with pytest.raises(OutOfOrderSequenceError, match=r"expected the first to be 1"):
        partition.append(0, 2)


def test_a_duplicate_of_one_of_the_last_five_batches_gets_its_original_offsets():
    partition = Partition()
    offsets = [partition.append(0, sequence * 2, count=2) for sequence in range(BATCHES_RETAINED)]
    end = partition.end_offset
    for sequence, original in enumerate(offsets):
        assert partition.append(0, sequence * 2, count=2) == original
    assert partition.end_offset == end
    assert partition.state.statistics().duplicate_count == BATCHES_RETAINED


def test_a_retry_older_than_the_last_five_batches_is_refused_not_written():
    partition = Partition()
    for sequence in range(BATCHES_RETAINED + 1):
        partition.append(0, sequence)
    with pytest.raises(OutOfOrderSequenceError):
        partition.append(0, 0)


def test_a_batch_overlapping_a_written_one_is_not_a_duplicate():
    partition = Partition()
    partition.append(0, 0, count=3)
    with pytest.raises(OutOfOrderSequenceError):
        partition.append(0, 1, count=3)


def test_sequence_wraps_around_after_int32_max():
    partition = Partition()
    partition.append(0, SEQUENCE_MAX - 1, count=2)  # an unknown producer may start anywhere
    assert partition.append(0, 0) == (2, 2)


def test_a_batch_spanning_the_wrap_ends_at_the_wrapped_sequence():
    partition = Partition()
    partition.append(0, SEQUENCE_MAX - 1, count=4)
    assert partition.state.entry(PID).last_sequence == 1
    assert partition.append(0, SEQUENCE_MAX - 1, count=4) == (0, 3)  # its retry is a duplicate
    partition.append(0, 2)


def test_an_unknown_producer_may_start_at_any_sequence():
    # Kafka since KIP-360: its state may have expired; everything after is checked.
    partition = Partition()
    partition.append(0, 17)
    with pytest.raises(OutOfOrderSequenceError):
        partition.append(0, 19)


def test_a_lower_epoch_is_fenced():
    partition = Partition()
    partition.append(1, 0)
    with pytest.raises(InvalidProducerEpochError, match="below its current epoch 1"):
        partition.append(0, 1)
    assert partition.state.statistics().fenced_count == 1


def test_a_new_epoch_must_start_at_sequence_zero():
    partition = Partition()
    partition.append(0, 0)
    with pytest.raises(OutOfOrderSequenceError, match="must start at sequence 0"):
        partition.append(1, 1)
    partition.append(1, 0)
    assert partition.state.entry(PID).epoch == 1


def test_a_new_epoch_forgets_the_old_epochs_batches():
    partition = Partition()
    partition.append(0, 0)
    partition.append(1, 0)
    # Epoch 0's batch is no duplicate any more, and epoch 0 is fenced.
    with pytest.raises(InvalidProducerEpochError):
        partition.append(0, 0)


def test_producers_are_independent():
    partition = Partition()
    partition.append(0, 0, pid=1)
    partition.append(0, 0, pid=2)
    assert partition.append(0, 0, pid=1) == (0, 0)
    assert partition.append(0, 1, pid=2) == (2, 2)


def test_transactional_batches_are_refused_with_a_clear_error():
    partition = Partition()
    with pytest.raises(TransactionsNotSupportedError, match="no transactions"):
        partition.append(0, 0, is_transactional=True)


def test_replay_applies_stored_batches_without_judging_them():
    # testNoValidationOnFirstEntryWhenLoadingLog: the log is the truth.
    state = ProducerStateManager("t-0")
    for base_offset, sequence in ((0, 5), (1, 9)):
        state.replay(producer_fields(batch(b"v", producer_id=PID, producer_epoch=0, base_sequence=sequence)), base_offset, 5, 5)
    assert state.entry(PID).last_sequence == 9
    assert state.map_end_offset == 2


def test_expiry_forgets_producers_idle_for_the_expiration_time():
    state = ProducerStateManager("t-0")
    state.complete(PendingAppend(1, 0, 0), 0, 0, timestamp_ms=0, now_ms=1_000)
    state.complete(PendingAppend(2, 0, 0), 1, 1, timestamp_ms=0, now_ms=5_000)
    assert state.remove_expired(now_ms=10_999, expiration_ms=10_000) == 0
    assert state.remove_expired(now_ms=11_000, expiration_ms=10_000) == 1
    assert state.entry(1) is None and state.entry(2) is not None


def test_snapshot_entries_round_trip_the_last_batch_per_producer():
    partition = Partition()
    partition.append(0, 0, count=2)
    partition.append(0, 2, count=3)
    entries = partition.state.snapshot_entries()
    restored = ProducerStateManager("t-0")
    restored.load(entries, partition.end_offset, now_ms=5, expiration_ms=10)
    entry = restored.entry(PID)
    assert (entry.epoch, entry.last_sequence, list(entry.batches)) == (0, 4, [BatchMetadata(4, 4, 2, 5)])
    resent = batch(b"v", b"v", b"v", producer_id=PID, producer_epoch=0, base_sequence=2)
    assert restored.check(resent) == BatchMetadata(4, 4, 2, 5)


def test_loading_a_snapshot_leaves_out_expired_producers():
    partition = Partition()
    partition.append(0, 0)
    restored = ProducerStateManager("t-0")
    restored.load(partition.state.snapshot_entries(), 1, now_ms=15, expiration_ms=10)
    assert restored.entry(PID) is None
