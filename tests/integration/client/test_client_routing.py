"""The client's routing against one real service (no cluster): Admin.metadata answers the one
instance as the owner of everything, a bootstrap list connects to its first reachable address,
and a single address costs no Metadata call (routing stays idle until a refusal names an owner)."""

from __future__ import annotations

import socket

import pytest

from seglog import Admin, AsyncProducer, ClusterMetadata, Consumer, PartitionOwner, Producer


def _dead_address() -> str:
    """A loopback port nothing listens on (bound, then closed: connecting is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def test_metadata_of_a_single_process_names_it_the_owner_of_every_partition(seglog_service, make_topic):
    topic = make_topic(partitions=3)
    with Admin(seglog_service.address) as admin:
        metadata = admin.metadata([topic])
    assert isinstance(metadata, ClusterMetadata) and not metadata.cluster_mode
    assert [(i.instance_id, i.alive) for i in metadata.instances] == [("local", True)]
    assert metadata.partitions == tuple(
        PartitionOwner(topic, n, "local", metadata.instances[0].address, 0, True) for n in range(3))
    assert metadata.owner_of(topic, 2) == metadata.partitions[2] and metadata.owner_of(topic, 3) is None


@pytest.mark.parametrize("as_list", [False, True], ids=["comma-separated", "list"])
def test_a_bootstrap_list_connects_to_its_first_reachable_address(seglog_service, make_topic, as_list):
    topic = make_topic(partitions=2)
    addresses = [_dead_address(), seglog_service.address]
    server = addresses if as_list else ",".join(addresses)
    with Admin(server) as admin:
        assert admin.describe_topic(topic).partition_count == 2
    with Producer(server) as producer:
        assert producer.send(topic, b"via the second address", partition=1).result().offset == 0
    with Consumer(server, topic=topic, partition=1, start="earliest") as consumer:
        assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"via the second address"]


def test_a_bootstrap_list_of_unreachable_addresses_fails_naming_them(seglog_service):
    from seglog import ServiceUnavailableError

    dead = [_dead_address(), _dead_address()]
    with Admin(dead, request_timeout_ms=2000) as admin:
        with pytest.raises(ServiceUnavailableError, match="none of the bootstrap addresses") as info:
            admin.list_topics()
    assert all(address in str(info.value) for address in dead)


@pytest.mark.parametrize("server", ["", ",", "a:1,,b:2", []], ids=["empty", "comma", "empty-entry", "empty-list"])
def test_an_empty_bootstrap_list_is_refused_in_the_constructor(server):
    with pytest.raises(ValueError, match="server"):
        Producer(server)


async def test_a_single_address_producer_asks_no_metadata(seglog_service, make_topic):
    topic = make_topic(partitions=2)
    async with AsyncProducer(seglog_service.address) as producer:
        for partition in (0, 1, 0):
            await (await producer.send(topic, b"x", partition=partition))
        routing = producer._router.statistics()
        sent = producer._transport.statistics()
    assert (routing.metadata_refreshes, routing.redirects, routing.owner_channels) == (0, 0, 0)
    assert sent.requests_failed == 0
