"""Revocation reaches open streams: a real service, its token file and ACL edited, SIGHUP, and
the Consume and ProduceStream calls that were open before it."""

from __future__ import annotations

import queue
import signal
import time

import grpc
import pytest
from integration_helpers import ServiceProcess, make_batch

from seglog.v1 import log_service_pb2 as pb
from seglog_server.security.token_file import create_token, format_entry

pytestmark = pytest.mark.integration

TOPIC = "revocable"


def _rule(principal: str, operations: str) -> str:
    return f'[[allow]]\nprincipals = ["{principal}"]\noperations = [{operations}]\ntopics = ["{TOPIC}"]\n'


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


def test_open_streams_of_a_revoked_principal_stop_at_their_next_message(tmp_path):
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
        stub.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=1), timeout=10,
                         metadata=_bearer(tokens["root"]))
        consumes, producers = {}, {}
        for name in ("alice", "bob"):
            producers[name] = _OpenProduceStream(stub, tokens[name])
            assert not producers[name].send(b"before " + name.encode()).HasField("error")
            consumes[name] = stub.Consume(pb.ConsumeRequest(
                topic=TOPIC, partition=0, position=pb.START_POSITION_EARLIEST), timeout=60,
                metadata=_bearer(tokens[name]))
            next(consumes[name])  # the stream delivers while allowed
        # alice loses her token line and her rule; bob keeps his token but loses his rule.
        token_file.write_text(format_entry(entries["root"]) + format_entry(entries["bob"]))
        acl_file.write_text(_rule("root", '"admin", "read", "write"'))
        service.signal(signal.SIGHUP)
        _wait_for_log(service, "security files reloaded")
        end_before = stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=0, offset=0), timeout=10,
                                metadata=_bearer(tokens["root"])).high_watermark

        expected = {"alice": grpc.StatusCode.UNAUTHENTICATED, "bob": grpc.StatusCode.PERMISSION_DENIED}
        for name, code in expected.items():
            answer = producers[name].send(b"after " + name.encode())
            assert answer.error.code == code.value[0], (name, answer)
            producers[name].close()
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
        assert "authentication revoked" in service.log()
    finally:
        assert service.stop() == 0, service.log()
