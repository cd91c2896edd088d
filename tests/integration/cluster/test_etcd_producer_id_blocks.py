"""Producer-id blocks from the cluster's etcd counter (cluster/producer_id_blocks.py), against a
real etcd: allocators racing on threads, each with its own gateway (as every instance has), never
get overlapping blocks; the first block starts at the wall-clock floor; an etcd that does not
answer raises EtcdUnavailableError and reserves nothing."""

from __future__ import annotations

import threading

import pytest

from seglog_server.cluster import ClusterKeys, EtcdGateway, EtcdUnavailableError, reserve_producer_id_block
from seglog_server.cluster.errors import MalformedRecordError
from seglog_server.cluster.etcd_gateway import b64
from seglog_server.storage.producers.producer_ids import BLOCK_SIZE, AllocatedProducerIds

pytestmark = pytest.mark.integration

NOW_MS = 1_700_000_000_000


@pytest.fixture
def keys(request):
    return ClusterKeys(f"pid-{request.node.name[:40]}")


@pytest.fixture
def gateways(etcd):
    opened: list[EtcdGateway] = []

    def open_gateway(timeout_s: float = 5) -> EtcdGateway:
        opened.append(EtcdGateway((etcd.endpoint,), timeout_s=timeout_s))
        return opened[-1]

    yield open_gateway
    for gateway in opened:
        gateway.close()


def test_the_first_block_starts_at_the_wall_clock_floor_and_the_next_follows_it(gateways, keys):
    gateway = gateways()
    assert reserve_producer_id_block(gateway, keys, BLOCK_SIZE, lambda: NOW_MS) == NOW_MS * BLOCK_SIZE
    # A later clock does not move an existing counter: blocks follow one another.
    assert reserve_producer_id_block(gateway, keys, BLOCK_SIZE, lambda: NOW_MS + 10**6) == (NOW_MS + 1) * BLOCK_SIZE
    assert gateway.get(keys.producer_id_block()).value == str((NOW_MS + 2) * BLOCK_SIZE).encode()


def test_allocators_racing_on_threads_never_get_overlapping_blocks(gateways, keys):
    threads_n, blocks_each = 6, 25
    starts: list[list[int]] = [[] for _ in range(threads_n)]
    errors: list[BaseException] = []
    ready = threading.Barrier(threads_n)

    def allocate(index: int) -> None:
        gateway = gateways()  # one gateway per thread, as per instance
        try:
            ready.wait(timeout=30)
            for _ in range(blocks_each):
                starts[index].append(reserve_producer_id_block(gateway, keys, BLOCK_SIZE, lambda: NOW_MS))
        except BaseException as exc:  # reported below, not lost on the thread
            errors.append(exc)

    threads = [threading.Thread(target=allocate, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    every = sorted(start for each in starts for start in each)
    assert len(every) == threads_n * blocks_each
    # Disjoint and gap-free: the counter advanced exactly once per block reserved.
    assert every == [NOW_MS * BLOCK_SIZE + i * BLOCK_SIZE for i in range(len(every))]


def test_ids_served_by_several_allocators_over_one_counter_are_all_distinct(gateways, keys):
    allocators = [AllocatedProducerIds(lambda gateway=gateways(): reserve_producer_id_block(
        gateway, keys, BLOCK_SIZE, lambda: NOW_MS)) for _ in range(3)]
    ids = [allocator.next_id() for _ in range(BLOCK_SIZE + 5) for allocator in allocators]
    assert len(set(ids)) == len(ids)


def test_a_counter_not_written_by_an_instance_is_refused_not_guessed(gateways, keys):
    gateway = gateways()
    gateway.txn([], [{"request_put": {"key": b64(keys.producer_id_block()), "value": b64("garbage")}}])
    with pytest.raises(MalformedRecordError, match="not a producer-id counter") as raised:
        reserve_producer_id_block(gateway, keys, BLOCK_SIZE, lambda: NOW_MS)
    assert raised.value.key == keys.producer_id_block()  # the cluster's own error, naming the key


def test_an_etcd_that_does_not_answer_reserves_nothing_and_the_next_reservation_follows(etcd, gateways, keys):
    gateway = gateways(timeout_s=0.5)
    first = reserve_producer_id_block(gateway, keys, BLOCK_SIZE, lambda: NOW_MS)
    etcd.pause()
    try:
        with pytest.raises(EtcdUnavailableError, match="etcd unavailable at"):
            reserve_producer_id_block(gateway, keys, BLOCK_SIZE, lambda: NOW_MS)
    finally:
        etcd.resume()
    assert reserve_producer_id_block(gateways(), keys, BLOCK_SIZE, lambda: NOW_MS) == first + BLOCK_SIZE
