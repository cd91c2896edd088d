"""Revocation reaches open streams: a real service, its token file and ACL edited, SIGHUP, and
the Consume and ProduceStream calls that were open before it end with the status (a Consume
parked at the tail of an idle topic at the reload itself, the others at their next message or
response)."""

from __future__ import annotations

import queue
import signal
import time

import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess, make_batch

from seglog.v1 import log_service_pb2 as pb
from seglog_server.security.token_file import create_token, format_entry

pytestmark = pytest.mark.integration

TOPIC = "revocable"
IDLE_TOPIC = "idle"  # nothing is written to it: its Consume streams stay parked at the tail


def _rule(principal: str, operations: str) -> str:
    return (f'[[allow]]\nprincipals = ["{principal}"]\noperations = [{operations}]\n'
            f'topics = ["{TOPIC}", "{IDLE_TOPIC}"]\n')


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _wait_for_log(service, text: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in service.log():
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{service.log()}"
        time.sleep(0.05)


class _OpenProduceStream:
    """A ProduceStream whose messages the test sends one at a time."""

    def __init__(self, stub, token: str) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._responses = stub.ProduceStream(iter(self._requests.get, None), timeout=60,
                                             metadata=_bearer(token))
        self._next_id = 0

    def send(self, value: bytes) -> pb.ProduceStreamResponse:
        self._next_id += 1
        self._requests.put(pb.ProduceStreamRequest(correlation_id=self._next_id, produce=pb.ProduceRequest(
            topic=TOPIC, partition=0, records=make_batch([value]))))
        return next(self._responses)

    def close(self) -> None:
        self._requests.put(None)
        for _ in self._responses:
            pass


def test_open_streams_of_a_revoked_principal_end_with_the_status(tmp_path):
    tokens = {}
    entries = {}
    for name in ("root", "alice", "bob"):
        tokens[name], entries[name] = create_token(name)
    token_file, acl_file = tmp_path / "tokens", tmp_path / "acl.toml"
    token_file.write_text("".join(format_entry(e) for e in entries.values()))
    read_write = '"read", "write"'
    acl_file.write_text(_rule("root", '"admin", "read", "write"') + _rule("alice", read_write)
                        + _rule("bob", read_write))
    service = ServiceProcess(tmp_path, [tmp_path / "data"], [
        "--auth-tokens", str(token_file), "--acl", str(acl_file)]).start()
    try:
        stub = service.stub
        for topic in (TOPIC, IDLE_TOPIC):
            stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1), timeout=10,
                             metadata=_bearer(tokens["root"]))
        consumes, producers, parked = {}, {}, {}
        for name in ("alice", "bob"):
            producers[name] = _OpenProduceStream(stub, tokens[name])
            assert not producers[name].send(b"before " + name.encode()).HasField("error")
            consumes[name] = stub.Consume(pb.ConsumeRequest(
                topic=TOPIC, partition=0, position=pb.START_POSITION_EARLIEST), timeout=60,
                metadata=_bearer(tokens[name]))
            next(consumes[name])  # the stream delivers while allowed
            parked[name] = stub.Consume(pb.ConsumeRequest(
                topic=IDLE_TOPIC, partition=0, position=pb.START_POSITION_LATEST), timeout=30,
                metadata=_bearer(tokens[name]))
            parked[name].initial_metadata()  # open, and parked at the tail: nothing to read
        # alice loses her token line and her rule; bob keeps his token but loses his rule.
        token_file.write_text(format_entry(entries["root"]) + format_entry(entries["bob"]))
        acl_file.write_text(_rule("root", '"admin", "read", "write"'))
        service.signal(signal.SIGHUP)
        _wait_for_log(service, "security files reloaded")
        end_before = stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=0, offset=0), timeout=10,
                                metadata=_bearer(tokens["root"])).high_watermark

        expected = {"alice": grpc.StatusCode.UNAUTHENTICATED, "bob": grpc.StatusCode.PERMISSION_DENIED}
        for name, code in expected.items():
            # The parked Consume ends at the reload, without any write to its topic.
            with pytest.raises(grpc.RpcError) as info:
                next(parked[name])
            assert info.value.code() == code, (name, info.value)
            assert dict(info.value.trailing_metadata()).get("seglog-error"), info.value
        # alice's ProduceStream: its next message ends the stream UNAUTHENTICATED, unwritten.
        with pytest.raises(grpc.RpcError) as info:
            producers["alice"].send(b"after alice")
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value
        assert dict(info.value.trailing_metadata()).get("seglog-error"), info.value
        # bob's token stands: each message is authorized as its unary twin (a bidirectional
        # stream names its topics per message), so it is refused PERMISSION_DENIED, unwritten.
        answer = producers["bob"].send(b"after bob")
        assert answer.error.code == grpc.StatusCode.PERMISSION_DENIED.value[0], answer
        producers["bob"].close()
        stub.Produce(pb.ProduceRequest(topic=TOPIC, partition=0, records=make_batch([b"new"])),
                     timeout=10, metadata=_bearer(tokens["root"]))
        for name, code in expected.items():
            with pytest.raises(grpc.RpcError) as info:
                for _ in consumes[name]:  # only records written before the reload, then the end
                    pass
            assert info.value.code() == code, (name, info.value)
        end_after = stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=0, offset=0), timeout=10,
                               metadata=_bearer(tokens["root"])).high_watermark
        assert end_after == end_before + 1  # root's record only: no stream wrote after the reload
        # alice's three streams each log their end once.
        assert service.log().count("authentication revoked") == 3, service.log()
    finally:
        assert service.stop() == 0, service.log()
