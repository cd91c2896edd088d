"""The producer's default batch_size against the limits it must fit: the client's own request
limit, the service's default max.message.bytes, request size and records a batch, and the
buffer the batches are queued in. A default above any of them would have every default producer
refused (or blocked) on its first full batch."""

from __future__ import annotations

import inspect

from seglog import AsyncProducer, Producer
from seglog._producer_config import BATCH_SIZE_DEFAULT, BUFFER_BYTES_DEFAULT, MAX_REQUEST_BYTES_DEFAULT
from seglog.producer import IDEMPOTENT_IN_FLIGHT_MAX
from seglog.records.header import RECORD_BATCH_OVERHEAD
from seglog_server.config import REQUEST_OVERHEAD_BYTES, ServiceConfig
from seglog_server.storage.base.log_config import LogConfig

# The fewest bytes one record of a v2 batch takes: length, attributes, timestamp delta, offset
# delta, key length, value length and header count, one byte each.
RECORD_BYTES_MIN = 7
# Partitions whose full windows (IDEMPOTENT_IN_FLIGHT_MAX batches each) the default buffer holds.
PARTITIONS_BUFFERED = 16


def test_a_full_default_batch_fits_the_clients_request_limit():
    # a batch is closed once a record would take it past batch_size, so its header rides on top
    assert BATCH_SIZE_DEFAULT + RECORD_BATCH_OVERHEAD <= MAX_REQUEST_BYTES_DEFAULT


def test_a_full_default_batch_fits_the_services_defaults():
    service = ServiceConfig()
    assert BATCH_SIZE_DEFAULT + RECORD_BATCH_OVERHEAD <= LogConfig().max_message_bytes
    assert BATCH_SIZE_DEFAULT + RECORD_BATCH_OVERHEAD + REQUEST_OVERHEAD_BYTES <= service.request_bytes_max
    assert BATCH_SIZE_DEFAULT // RECORD_BYTES_MIN <= service.batch_records_max


def test_the_default_buffer_holds_many_partitions_windows_of_default_batches():
    assert BUFFER_BYTES_DEFAULT >= PARTITIONS_BUFFERED * IDEMPOTENT_IN_FLIGHT_MAX * BATCH_SIZE_DEFAULT


def test_both_producers_default_to_the_declared_batch_size():
    for producer in (AsyncProducer, Producer):
        assert inspect.signature(producer.__init__).parameters["batch_size"].default == BATCH_SIZE_DEFAULT, producer
