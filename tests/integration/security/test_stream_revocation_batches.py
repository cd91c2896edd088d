"""A token revoked while a ProduceStream message of several batches is being appended: a real
service whose first append is held (the after-append fault seam) while the token file is edited
and SIGHUP reloads it. The batch appended before answers in its slot, the batches after have no
slot (not appended) and the stream ends UNAUTHENTICATED right after that answer, as a stream of
one batch a message ends before its next message."""

from __future__ import annotations

import queue
import signal
import time

import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess, make_batch

from seglog.v1 import log_service_pb2 as pb
from seglog_server.security.token_file import create_token, format_entry

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "revocable-batches"
# The first appended batch's answer is held this long: the reload happens inside it (the test
# waits for the append and for the reload's log line, not for a time).
_HELD_MS = 6000


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _wait_until(check, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_token_revoked_inside_a_message_of_several_batches_ends_the_stream_after_its_answer(tmp_path):
    tokens, entries = {}, {}
    for name in ("root", "alice"):
        tokens[name], entries[name] = create_token(name)
    token_file, acl_file = tmp_path / "tokens", tmp_path / "acl.toml"
    token_file.write_text("".join(format_entry(e) for e in entries.values()))
    acl_file.write_text(
        '[[allow]]\nprincipals = ["root"]\noperations = ["admin", "read", "write"]\ntopics = ["*"]\n'
        f'[[allow]]\nprincipals = ["alice"]\noperations = ["read", "write"]\ntopics = ["{TOPIC}"]\n'
    )
    service = ServiceProcess(
        tmp_path, [tmp_path / "data"], ["--auth-tokens", str(token_file), "--acl", str(acl_file)],
        {"SEGLOG_TEST_FAULT_AFTER_APPEND": f"delay_ms:{_HELD_MS}:1"},
    ).start()
    try:
        stub = service.stub
        root = _bearer(tokens["root"])
        stub.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=1), timeout=10, metadata=root)

        def end_offset() -> int:
            return stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=0, offset=0), timeout=10,
                              metadata=root).high_watermark

        requests: queue.Queue = queue.Queue()
        responses = stub.ProduceStream(iter(requests.get, None), timeout=60, metadata=_bearer(tokens["alice"]))
        message = pb.ProduceStreamRequest(correlation_id=1)
        for index in range(3):
            batch = message.more.add() if index else message.produce
            batch.CopyFrom(pb.ProduceRequest(topic=TOPIC, partition=0, records=make_batch([b"b%d" % index])))
        requests.put(message)
        _wait_until(lambda: end_offset() == 1, "the first batch was not appended")  # held now
        token_file.write_text(format_entry(entries["root"]))  # alice's token is gone
        service.signal(signal.SIGHUP)
        _wait_until(lambda: "security files reloaded" in service.log(), "no reload logged")

        answer = next(responses)
        assert answer.correlation_id == 1
        assert not answer.HasField("error") and answer.produce.base_offset == 0
        assert len(answer.more) == 0  # the batches after the revocation: no slot, not appended
        with pytest.raises(grpc.RpcError) as info:
            next(responses)  # the stream ends without another message sent
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value
        requests.put(None)
        assert end_offset() == 1
    finally:
        assert service.stop() == 0, service.log()
