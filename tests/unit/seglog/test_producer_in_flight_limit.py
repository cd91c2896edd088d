"""A producer's batches in flight a partition, against what idempotence can answer: the service
keeps a producer's last five batches a partition to answer a resent one (Kafka's
NUM_BATCHES_TO_RETAIN), so an idempotent producer refuses a larger window at construction, in
the caller's thread, as Kafka's does; without idempotence any window up to the requests'."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog import AsyncProducer, Producer
from seglog.producer import IDEMPOTENT_IN_FLIGHT_MAX
from seglog_server.storage.producers.producer_state import BATCHES_RETAINED

ADDRESS = "127.0.0.1:9"  # never connected: construction alone


def test_the_limit_is_what_the_service_retains():
    assert IDEMPOTENT_IN_FLIGHT_MAX == BATCHES_RETAINED


@given(window=st.integers(1, 32), idempotent=st.booleans())
def test_a_window_beyond_the_retained_batches_is_refused_only_with_idempotence(window, idempotent):
    options = dict(max_in_flight_per_partition=window, max_in_flight_requests=32, enable_idempotence=idempotent)
    if idempotent and window > IDEMPOTENT_IN_FLIGHT_MAX:
        with pytest.raises(ValueError, match=rf"max_in_flight_per_partition must be at most 5 .*got {window}$"):
            AsyncProducer(ADDRESS, **options)
    else:
        producer = AsyncProducer(ADDRESS, **options)
        assert producer._config.max_in_flight_per_partition == window


def test_the_sync_producer_refuses_it_in_the_callers_thread_without_a_loop_thread():
    threads = threading.active_count()
    with pytest.raises(ValueError, match="enable_idempotence=True"):
        Producer(ADDRESS, max_in_flight_per_partition=6)
    assert threading.active_count() == threads
    with Producer(ADDRESS, max_in_flight_per_partition=5):
        pass
