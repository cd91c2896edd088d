"""Fencing holds at the acknowledgement, not only at admission: a produce admitted just before the
fence whose append is held (the fault seam) while etcd is frozen past the fencing deadline answers
UNAVAILABLE, never OK, and the producer's retry after etcd returns is acknowledged."""

from __future__ import annotations

import time

import grpc
import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc.fault_seams import FAULT_ENV
from tests.support.integration_helpers import ServiceProcess, error_class, make_batch

pytestmark = pytest.mark.integration
# Fenced after 4 - 2 x 0.8 - 0.4 = 2 s without a renewal; the held append outlasts that.
LEASE_TTL_MS = 4000
HOLD_MS = 3500


def _produce(service: ServiceProcess, value: bytes, **fields) -> pb.ProduceResponse:
    return service.stub.Produce(pb.ProduceRequest(topic="t", partition=0, records=make_batch([value]), **fields),
                                timeout=15)


@pytest.mark.slow  # waits past the fencing deadline and for etcd's return: ~8 s
@pytest.mark.parametrize("acks", [pb.ACKS_WRITTEN, pb.ACKS_FSYNCED], ids=["written", "fsynced"])
def test_a_produce_held_past_the_fence_answers_unavailable_not_ok(tmp_path, etcd, acks):
    data = tmp_path / "data"
    data.mkdir()
    service = ServiceProcess(tmp_path, [data], [
        "--etcd", etcd.endpoint, "--cluster-name", f"ackfence-{acks}", "--instance-id", "a",
        "--lease-ttl-ms", str(LEASE_TTL_MS)], env={FAULT_ENV: f"delay_ms:{HOLD_MS}:1"}).start()
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
        etcd.pause()  # the renewals stop now; the produce below is admitted before the fence
        try:
            with pytest.raises(grpc.RpcError) as refused:
                _produce(service, b"held", acks=acks)
        finally:
            etcd.resume()
        error = refused.value
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
        assert error_class(error) == "InstanceFencedError", error.details()
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = _produce(service, b"after", acks=acks)
                break
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
                assert time.monotonic() < deadline, "produce not accepted after etcd resumed"
                time.sleep(0.1)
        # The held batch was written (offset 0) but never acknowledged; the next one follows it.
        assert answer.base_offset == 1
    finally:
        service.stop()
