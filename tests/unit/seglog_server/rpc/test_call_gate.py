"""The call gate with stand-in call contexts: who a call is, and what it may do."""

from __future__ import annotations

import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc.call_gate import CallGate, current_principal
from seglog_server.security import (
    ANONYMOUS,
    AuthenticationFailedError,
    PermissionDeniedError,
    PrincipalLimitError,
    PrincipalQuota,
    QuotaBook,
    SecurityPaths,
    SecurityPolicy,
)
from seglog_server.security.token_file import create_token, format_entry


class Context:
    def __init__(self, metadata=(), auth=None):
        self._metadata, self._auth = tuple(metadata), auth or {}

    def invocation_metadata(self):
        return self._metadata

    def auth_context(self):
        return self._auth

    def peer(self):
        return "ipv4:127.0.0.1:1"


def _policy(tmp_path, *, tokens=None, acl=None):
    paths = {}
    if tokens is not None:
        (tmp_path / "tokens").write_text("".join(tokens))
        paths["auth_tokens"] = str(tmp_path / "tokens")
    if acl is not None:
        (tmp_path / "acl.toml").write_text(acl)
        paths["acl"] = str(tmp_path / "acl.toml")
    return SecurityPolicy(SecurityPaths(**paths), PrincipalQuota(), token_cache_max=16,
                          quota_window_ms=1000, quota_delay_ms_max=1000)


async def test_an_open_gate_admits_everyone_as_anonymous():
    call = await CallGate().admit("DeleteTopic", pb.DeleteTopicRequest(topic="t"), Context())
    assert call.principal == ANONYMOUS == current_principal()
    call.release()


async def test_a_token_names_the_principal_and_anything_else_fails_alike(tmp_path):
    token, entry = create_token("alice")
    gate = CallGate(_policy(tmp_path, tokens=[format_entry(entry)]))
    call = await gate.admit("ListTopics", pb.ListTopicsRequest(),
                            Context([("authorization", f"Bearer {token}")]))
    assert call.principal == "alice"
    call.release()
    messages = set()
    for metadata in ([], [("authorization", "Bearer nope")], [("authorization", token)]):
        with pytest.raises(AuthenticationFailedError) as info:
            await gate.admit("ListTopics", pb.ListTopicsRequest(), Context(metadata))
        messages.add(str(info.value))
    assert len(messages) == 1
    gate.close()


async def test_a_certificate_principal_is_its_common_name_else_its_subject(tmp_path):
    policy = _policy(tmp_path)
    policy.tls = type("Tls", (), {"mutual": True})()  # as if --tls-client-ca were given
    gate = CallGate(policy)
    by_cn = Context(auth={"x509_common_name": [b"alice"], "x509_subject": [b"CN=alice,O=x"]})
    by_subject = Context(auth={"x509_subject": [b"O=no-cn"]})
    assert (await gate.admit("ListTopics", pb.ListTopicsRequest(), by_cn)).principal == "alice"
    assert (await gate.admit("ListTopics", pb.ListTopicsRequest(), by_subject)).principal == "O=no-cn"


async def test_the_acl_is_checked_on_every_topic_a_request_names(tmp_path):
    gate = CallGate(_policy(tmp_path, acl='[[allow]]\nprincipals = ["*"]\noperations = ["describe"]\n'
                                          'topics = ["a"]\n'))
    request = pb.OffsetsForTimesRequest()
    request.partitions.add(topic="a", partition=0)
    (await gate.admit("OffsetsForTimes", request, Context())).release()
    request.partitions.add(topic="b", partition=0)
    with pytest.raises(PermissionDeniedError, match="'ANONYMOUS' is not allowed to describe topic 'b'"):
        await gate.admit("OffsetsForTimes", request, Context())
    assert gate.quotas.statistics().in_use_by_principal[ANONYMOUS]["requests"] == 0


async def test_an_unclassified_method_is_never_admitted():
    with pytest.raises(KeyError):
        await CallGate().admit("NotInTheTable", pb.ListTopicsRequest(), Context())


async def test_per_client_admission_keys_on_the_principal_once_the_gate_named_one(tmp_path):
    from seglog_server.rpc.admission import client_of

    token, entry = create_token("alice")
    gate = CallGate(_policy(tmp_path, tokens=[format_entry(entry)]))
    context = Context([("authorization", f"Bearer {token}")])
    assert client_of(context) == "127.0.0.1"  # before the gate: the peer's host
    (await gate.admit("ListTopics", pb.ListTopicsRequest(), context)).release()
    assert client_of(context) == "principal alice"
    gate.close()


async def test_statistics_count_failures_and_denials_and_the_bearer_hook_checks_tokens(tmp_path):
    token, entry = create_token("metrics-reader")
    policy = _policy(tmp_path, tokens=[format_entry(entry)],
                     acl='[[allow]]\nprincipals = ["x"]\noperations = ["read"]\ntopics = ["t"]\n')
    gate = CallGate(policy)
    with pytest.raises(AuthenticationFailedError):
        await gate.admit("ListTopics", pb.ListTopicsRequest(), Context())
    with pytest.raises(PermissionDeniedError):
        await gate.admit("DeleteTopic", pb.DeleteTopicRequest(topic="t"),
                         Context([("authorization", f"Bearer {token}")]))
    stats = gate.statistics()
    assert (stats.authentication_failure_count, stats.permission_denied_count) == (1, 1)
    assert stats.tokens.slow_check_count == 1
    # The hook an HTTP endpoint (metrics) uses: the same tokens, outside gRPC.
    assert policy.verify_bearer(f"Bearer {token}") == "metrics-reader"
    assert policy.verify_bearer("Bearer wrong") is None
    assert policy.verify_bearer(None) is None
    gate.close()


async def test_each_stream_message_holds_a_request_slot_of_its_principal_until_it_ends():
    gate = CallGate(quotas=QuotaBook(PrincipalQuota(requests_max=1), {}, window_ms=1000, delay_ms_max=0))
    stream = await gate.admit_stream("LookupStream", Context())
    lookup = pb.OffsetsForTimesRequest()
    lookup.partitions.add(topic="a", partition=0)

    def in_use() -> dict[str, int]:
        return gate.quotas.statistics().in_use_by_principal[ANONYMOUS]

    assert gate.begin_message(stream, lookup) == 0.0
    assert in_use() == {"requests": 1, "waiters": 0, "streams": 1}
    with pytest.raises(PrincipalLimitError, match="1 requests in progress"):
        gate.begin_message(stream, lookup)
    assert in_use()["requests"] == 1  # the refused message holds nothing
    gate.end_message(stream)
    assert in_use()["requests"] == 0
    stream.release()
    assert in_use() == {"requests": 0, "waiters": 0, "streams": 0}


async def test_a_stream_message_on_a_topic_the_acl_denies_is_refused_holding_nothing(tmp_path):
    gate = CallGate(_policy(tmp_path, acl='[[allow]]\nprincipals = ["*"]\noperations = ["describe"]\n'
                                          'topics = ["a"]\n'))
    stream = await gate.admit_stream("LookupStream", Context())
    lookup = pb.OffsetsForTimesRequest()
    lookup.partitions.add(topic="b", partition=0)
    with pytest.raises(PermissionDeniedError, match="'ANONYMOUS' is not allowed to describe topic 'b'"):
        gate.begin_message(stream, lookup)
    assert gate.quotas.statistics().in_use_by_principal[ANONYMOUS]["requests"] == 0
    stream.release()


async def test_a_produce_stream_message_is_charged_its_bytes_and_refused_holding_nothing_past_the_bound():
    """The produce quota on a ProduceStream message, as on a Produce call: the bytes charged and
    the answer's delay returned; past the delay bound, refused before any slot is taken."""
    from seglog_server.security import QuotaExceededError

    book = QuotaBook(PrincipalQuota(produce_bytes_per_s=1000), {}, window_ms=1000, delay_ms_max=2000,
                     clock=lambda: 0.0)
    gate = CallGate(quotas=book)
    stream = await gate.admit_stream("ProduceStream", Context())
    produce = pb.ProduceRequest(topic="t", records=b"x" * 3000)
    delay_s = gate.begin_message(stream, produce)
    assert 0 < delay_s <= 2.0
    assert book.statistics().in_use_by_principal[ANONYMOUS]["requests"] == 1
    gate.end_message(stream)
    gate.begin_message(stream, pb.ProduceRequest(topic="t", records=b"x" * 100_000))
    gate.end_message(stream)
    with pytest.raises(QuotaExceededError, match="over its produce quota of 1000 bytes/s"):
        gate.begin_message(stream, produce)
    assert book.statistics().in_use_by_principal[ANONYMOUS]["requests"] == 0
    stream.release()
