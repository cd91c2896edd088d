"""What the producer encodes ahead while a partition's window is full is let go when the batch
is built: on a real service on loopback, every batch goes out (first send, split pieces, retries)
holding no encoded copy of its records beside the message the sender keeps, the copies counted
never pass their share of buffer_bytes, and none is counted once everything is delivered. An
encoding ahead that runs out of memory fails no batch: each is encoded when it is built."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.integration_helpers import numbered_values, values_to_end

from seglog import Producer
from seglog._accumulator import ENCODED_AHEAD_BUFFER_SHARE, ProducerBatch
from seglog._send_window import SendWindow
from seglog.records import RecordBatchBuilder

BUFFER_BYTES = 4 << 20


def _watch(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Each batch placed in a window (sent or queued behind its limit): whether it still held
    records encoded ahead; and how many batches were encoded ahead at all."""
    seen: dict[str, Any] = {"placed": 0, "holding": 0, "encoded": 0}
    sent, queued, encode_ahead = SendWindow.sent, SendWindow.queued, ProducerBatch.encode_ahead

    def placed(place: Any) -> Any:
        def watched(self: SendWindow[Any], item: Any) -> Any:
            seen["placed"] += 1
            seen["holding"] += item[0].encoded_ahead
            return place(self, item)
        return watched

    def counted(self: ProducerBatch, *args: Any) -> Any:
        before = self.encoded_ahead
        result = encode_ahead(self, *args)
        seen["encoded"] += self.encoded_ahead and not before
        return result

    monkeypatch.setattr(SendWindow, "sent", placed(sent))
    monkeypatch.setattr(SendWindow, "queued", placed(queued))
    monkeypatch.setattr(ProducerBatch, "encode_ahead", counted)
    return seen


@pytest.mark.parametrize("compression, topic_bytes", [("none", None), ("gzip", None), ("none", 64 * 1024)])
def test_batches_go_out_holding_nothing_encoded_ahead(
    seglog_service: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch, compression: str, topic_bytes: int | None
) -> None:
    """Three partitions, 16 KiB batches (256 KiB into a 64 KiB topic: split pieces), a window
    of two: the head batches wait and are encoded ahead, and each is placed in its window
    holding nothing but its records (held its encoded copy while in flight before)."""
    seen = _watch(monkeypatch)
    configs = {} if topic_bytes is None else {"max.message.bytes": str(topic_bytes)}
    topic = make_topic(partitions=3, configs=configs)
    batch_size = 16 * 1024 if topic_bytes is None else 256 * 1024
    values = numbered_values(6_000)
    with Producer(seglog_service.address, compression=compression, batch_size=batch_size, linger_ms=20,
                  max_in_flight_per_partition=2, buffer_bytes=BUFFER_BYTES) as producer:
        accumulator = producer._async._accumulator
        peak = [0]
        for start in range(0, len(values), 500):
            for partition in range(3):
                producer.send_many(topic, values[start:start + 500], partition=partition)
            peak[0] = max(peak[0], accumulator._encoded_bytes)
        producer.flush()
        statistics = producer.statistics()
        assert accumulator._encoded_bytes == 0
    assert statistics.records_failed == 0
    assert (statistics.batches_split > 0) == (topic_bytes is not None)
    assert seen["encoded"] > 0 and seen["placed"] > 0
    assert seen["holding"] == 0
    assert peak[0] <= BUFFER_BYTES // ENCODED_AHEAD_BUFFER_SHARE
    for partition in range(3):
        assert values_to_end(seglog_service.address, topic, len(values), partition) == values


def test_encoding_ahead_out_of_memory_fails_no_batch(
    seglog_service: Any, make_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every encoding ahead raises MemoryError (the codec's buffers not to be had): the batches
    are built when sent, and every record is delivered (each such batch failed before, the
    MemoryError kept as its records' refusal)."""
    seen = _watch(monkeypatch)
    failed = [0]

    def out_of_memory(builder: RecordBatchBuilder) -> Any:
        failed[0] += 1
        raise MemoryError

    monkeypatch.setattr(RecordBatchBuilder, "seal", out_of_memory)
    topic = make_topic(partitions=2)
    values = numbered_values(4_000)
    with Producer(seglog_service.address, batch_size=16 * 1024, linger_ms=20,
                  max_in_flight_per_partition=1, buffer_bytes=BUFFER_BYTES) as producer:
        for start in range(0, len(values), 500):
            for partition in range(2):
                producer.send_many(topic, values[start:start + 500], partition=partition)
        producer.flush()
        statistics = producer.statistics()
        assert producer._async._accumulator._encoded_bytes == 0
    assert failed[0] > 0 and seen["encoded"] == 0
    assert statistics.records_failed == 0
    for partition in range(2):
        assert values_to_end(seglog_service.address, topic, len(values), partition) == values
