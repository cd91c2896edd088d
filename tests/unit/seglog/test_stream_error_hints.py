"""A stream refusal's owner hint (``StreamError.owner_*``) becomes the same client error as the
unary call's trailing ``seglog-owner-*`` metadata, for any code, class, hint and retry hint; and
the service writes every hint its unary twin would send into the stream's fields."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog._streams import error_from_stream
from seglog.errors import error_from_partition, error_from_rpc
from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc import cluster_routing, move_errors
from seglog_server.rpc.status import status_for
from seglog_server.rpc.streams import _owner_hint_into
from tests.unit.seglog.test_client_errors import FakeRpcError

_CODES = [code for code in grpc.StatusCode if code is not grpc.StatusCode.OK]
_CLASSES = st.sampled_from(["", "NotPartitionOwnerError", "PartitionOwnerGoneError", "QuotaExceededError",
                            "TopicGenerationError", "InstanceFencedError"])
_TEXT = st.text(st.characters(codec="ascii", min_codepoint=32), max_size=20)


@given(st.sampled_from(_CODES), _CLASSES, _TEXT, st.text(min_size=1, max_size=8).filter(str.isprintable),
       _TEXT, st.integers(0, 2**63 - 1), st.integers(0, 60_000))
def test_a_stream_refusal_and_its_unary_twin_become_the_same_error(code, error_class, message, owner_id,
                                                                   owner_address, epoch, retry_after_ms):
    trailing = [("seglog-owner-id", owner_id), ("seglog-owner-address", owner_address),
                ("seglog-epoch", str(epoch))]
    if error_class:
        trailing.append(("seglog-error", error_class))
    if retry_after_ms:
        trailing.append(("retry-after-ms", str(retry_after_ms)))
    unary = error_from_rpc(FakeRpcError(code, message or None, tuple(trailing)))
    streamed = error_from_stream(pb.StreamError(code=code.value[0], message=message, error_class=error_class,
                                                retry_after_ms=retry_after_ms, owner_id=owner_id,
                                                owner_address=owner_address, owner_epoch=epoch))
    assert type(streamed) is type(unary)
    assert (streamed.message, streamed.code, streamed.service_error, streamed.retry_after_ms) == \
        (unary.message, unary.code, unary.service_error, unary.retry_after_ms)
    hint = lambda e: (getattr(e, "owner_id", None), getattr(e, "owner_address", None), getattr(e, "epoch", None))  # noqa: E731
    assert hint(streamed) == hint(unary)
    # A lookup target's PartitionError carries the same hint, raised the same way.
    target = error_from_partition(pb.PartitionError(code=code.value[0], message=message, error_class=error_class,
                                                    owner_id=owner_id, owner_address=owner_address,
                                                    owner_epoch=epoch))
    assert hint(target) == (hint(unary) if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE)
                            else (None, None, None))


def test_a_stream_refusal_without_a_hint_stays_as_it_was():
    error = error_from_stream(pb.StreamError(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="x",
                                             error_class="NotPartitionOwnerError"))
    assert (error.owner_id, error.owner_address, error.epoch) == (None, None, None)  # an older service


@pytest.mark.parametrize("refusal", [
    cluster_routing.NotPartitionOwnerError("m", "b", "h:2", 4),
    cluster_routing.PartitionOwnerGoneError("m", "b", "h:2", 4),
    move_errors.NotMoveTargetError("m", "b", "h:2"),
])
def test_every_refusal_naming_an_owner_names_it_in_the_stream_fields(refusal):
    status = status_for(refusal)
    error = pb.StreamError()
    _owner_hint_into(error, status.extra_metadata)
    trailing = dict(status.trailing_metadata)
    assert (error.owner_id, error.owner_address, error.owner_epoch) == \
        (trailing["seglog-owner-id"], trailing["seglog-owner-address"], int(trailing.get("seglog-epoch", 0)))
