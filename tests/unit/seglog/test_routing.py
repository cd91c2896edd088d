"""Routing's pure parts: the bootstrap list, the owner hint's translation, Metadata's answer as
the client's value, and which refusals the router follows (no network)."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog._connection import ConnectionOptions, parse_servers
from seglog._routing import _worth_following, metadata_from
from seglog.errors import (
    FailedPreconditionError,
    NotPartitionOwnerError,
    OwnerUnavailableError,
    QuotaExceededError,
    RequestTimeoutError,
    ServiceUnavailableError,
    error_from_rpc,
    error_from_status,
)
from seglog.structs import ClusterInstance, PartitionOwner
from seglog.v1 import cluster_pb2 as cluster_pb
from tests.unit.seglog.test_client_errors import FakeRpcError

_HINT = (("seglog-owner-id", "b"), ("seglog-owner-address", "10.0.0.2:50551"), ("seglog-epoch", "3"))
_address = st.from_regex(r"[a-z0-9.\-]{1,12}:[0-9]{1,5}", fullmatch=True)


@given(st.lists(_address, min_size=1, max_size=5), st.sampled_from([",", ", ", " ,"]))
def test_a_bootstrap_list_parses_the_same_as_text_or_list_in_order_without_duplicates(addresses, separator):
    expected = tuple(dict.fromkeys(addresses))
    assert parse_servers(separator.join(addresses)) == expected
    assert parse_servers(addresses) == expected
    options = ConnectionOptions.resolve(separator.join(addresses))
    assert options.servers == expected and options.server == ",".join(expected)


@pytest.mark.parametrize("server", ["", " ", "a:1,", ",a:1", [], ["a:1", ""], [1], None])
def test_a_bootstrap_list_without_an_address_or_with_an_empty_one_is_refused(server):
    with pytest.raises(ValueError, match="server"):
        parse_servers(server)


def test_a_refusal_naming_the_owner_carries_the_hint():
    error = error_from_rpc(FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "owned by b",
                                        (("seglog-error", "NotPartitionOwnerError"), *_HINT)))
    assert isinstance(error, NotPartitionOwnerError) and isinstance(error, FailedPreconditionError)
    assert (error.owner_id, error.owner_address, error.epoch, error.retriable) == ("b", "10.0.0.2:50551", 3, True)


def test_a_gone_owner_is_an_unavailable_error_with_the_hint():
    error = error_from_rpc(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "b not registered since ...", _HINT))
    assert isinstance(error, OwnerUnavailableError) and isinstance(error, ServiceUnavailableError)
    assert (error.owner_id, error.epoch) == ("b", 3)


def test_a_stream_message_refusal_names_the_class_without_the_hint():
    error = error_from_status(grpc.StatusCode.FAILED_PRECONDITION, "owned by b at ...", "NotPartitionOwnerError")
    assert isinstance(error, NotPartitionOwnerError)
    assert (error.owner_id, error.owner_address, error.epoch) == (None, None, None)


def test_other_failed_preconditions_and_a_malformed_epoch_stay_as_they_were():
    plain = error_from_rpc(FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "x"))
    assert type(plain) is FailedPreconditionError
    odd = error_from_rpc(FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "x", (("seglog-owner-id", "b"),
                                                                                  ("seglog-epoch", "many"))))
    assert isinstance(odd, NotPartitionOwnerError) and (odd.owner_address, odd.epoch) == (None, None)


@pytest.mark.parametrize(
    ("error", "routed", "followed"),
    [
        (NotPartitionOwnerError("x"), False, True),
        (OwnerUnavailableError("x"), False, True),
        (ServiceUnavailableError("down"), True, True),  # a routed owner's channel died
        (ServiceUnavailableError("down"), False, False),  # the bootstrap instance: nothing to learn
        (QuotaExceededError("slow down"), True, False),
        (FailedPreconditionError("x"), True, False),
        (RequestTimeoutError("silent"), True, True),  # a routed owner paused or cut off
        (RequestTimeoutError("silent"), False, False),
    ],
)
def test_the_router_follows_owner_refusals_and_a_dead_routed_owner_only(error, routed, followed):
    assert _worth_following(error, routed) is followed


def test_metadata_is_the_clients_frozen_value_sorted_by_partition():
    response = cluster_pb.MetadataResponse(
        cluster_mode=True, cluster_name="c", instance_id="a", current=True,
        instances=[cluster_pb.InstanceMetadata(instance_id="a", address="h:1", alive=True)],
        partitions=[cluster_pb.PartitionMetadata(topic="t", partition=p, owner_id="a", owner_address="h:1",
                                                 epoch=p, owner_alive=True) for p in (1, 0)],
    )
    metadata = metadata_from(response)
    assert metadata.instances == (ClusterInstance("a", "h:1", True),)
    assert metadata.partitions == (PartitionOwner("t", 0, "a", "h:1", 0), PartitionOwner("t", 1, "a", "h:1", 1))
    with pytest.raises(AttributeError):
        metadata.cluster_mode = False  # type: ignore[misc]


@pytest.mark.parametrize("current", [True, False])
def test_a_metadata_answer_that_is_not_current_keeps_the_owner_hint_just_taken(current):
    from seglog._routing import Router
    from seglog.structs import ClusterMetadata, TopicPartition

    router = Router(ConnectionOptions(server="a:1"), bootstrap=None)  # no call is made: routes only
    hinted = TopicPartition("t", 0)
    router._routes[hinted] = "b:2"  # the hint of a NotPartitionOwnerError
    stale = (PartitionOwner("t", 0, "a", "a:1", 0), PartitionOwner("t", 1, "a", "a:1", 0))
    router._apply(ClusterMetadata(True, "seglog", "a", (), stale, current=current))
    assert router._routes[TopicPartition("t", 1)] == "a:1"
    assert router._routes[hinted] == ("a:1" if current else "b:2")
