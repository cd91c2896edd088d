"""The call gate with stand-in call contexts: who a call is, and what it may do."""

from __future__ import annotations

import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc.append_waiters import AppendWaiters
from seglog_server.rpc.call_gate import CallGate, current_principal
from seglog_server.security import (
    ANONYMOUS,
    AuthenticationBusyError,
    AuthenticationFailedError,
    PermissionDeniedError,
    PrincipalLimitError,
    PrincipalQuota,
    QuotaBook,
    SecurityPaths,
    SecurityPolicy,
)
from seglog_server.security.token_file import TOKEN_PREFIX, TokenEntry, create_token, format_entry, hash_token


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


async def test_a_certificate_principal_is_its_common_name_and_one_without_a_cn_is_refused(tmp_path):
    policy = _policy(tmp_path)
    policy.tls = type("Tls", (), {"mutual": True})()  # as if --tls-client-ca were given
    gate = CallGate(policy)
    by_cn = Context(auth={"x509_common_name": [b"alice"], "x509_subject": [b"CN=alice,O=x"]})
    assert (await gate.admit("ListTopics", pb.ListTopicsRequest(), by_cn)).principal == "alice"
    for auth in ({"x509_subject": [b"O=no-cn"]}, {"x509_subject": [b""], "x509_pem_cert": [b"-"]},
                 {"x509_common_name": [b""], "x509_subject": [b"CN="]}):
        with pytest.raises(AuthenticationFailedError, match="no subject common name"):
            await gate.admit("ListTopics", pb.ListTopicsRequest(), Context(auth=auth))
    with pytest.raises(AuthenticationFailedError, match="valid token or client certificate"):
        await gate.admit("ListTopics", pb.ListTopicsRequest(), Context())  # no certificate
    assert gate.statistics().authentication_failure_count == 4


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


# -- the cheap checks first, a bounded queue for the slow one --------------------------------------


def _cheap_token(principal: str, key_id: str) -> tuple[str, str]:
    """A token and its file line hashed with scrypt's smallest cost (n=2): the gate's queue is
    under test here, not the hash."""
    token = f"{TOKEN_PREFIX}{key_id}_{'s' * 43}"
    return token, format_entry(TokenEntry(principal, key_id, hash_token(token, n=2)))


def _bearer_context(token: str) -> Context:
    return Context([("authorization", f"Bearer {token}")])


async def test_unknown_key_ids_are_refused_at_once_without_a_slow_check(tmp_path):
    token, entry = create_token("alice")
    gate = CallGate(_policy(tmp_path, tokens=[format_entry(entry)]))
    for _ in range(50):
        unknown, _ = create_token("mallory")
        with pytest.raises(AuthenticationFailedError):
            await gate.admit("ListTopics", pb.ListTopicsRequest(), _bearer_context(unknown))
    stats = gate.statistics().tokens
    assert (stats.slow_check_count, stats.refused_without_hash_count) == (0, 50)
    gate.close()


async def test_a_full_verifier_queue_refuses_new_tokens_and_never_a_cached_one(tmp_path):
    import asyncio

    from seglog_server.security.token_store import SLOW_CHECKS_MAX as _VERIFIER_QUEUE_MAX

    known, line = _cheap_token("alice", "a" * 12)
    gate = CallGate(_policy(tmp_path, tokens=[line]))
    (await gate.admit("ListTopics", pb.ListTopicsRequest(), _bearer_context(known))).release()
    wrong = [f"{TOKEN_PREFIX}{'a' * 12}_{index:043d}" for index in range(_VERIFIER_QUEUE_MAX + 5)]

    async def admit(token):
        call = await gate.admit("ListTopics", pb.ListTopicsRequest(), _bearer_context(token))
        call.release()
        return call.principal

    # All start in one loop turn: the first _VERIFIER_QUEUE_MAX are queued, the rest refused.
    outcomes = await asyncio.gather(*(admit(t) for t in wrong), admit(known), return_exceptions=True)
    assert outcomes[-1] == "alice"
    busy = [o for o in outcomes if isinstance(o, AuthenticationBusyError)]
    failed = [o for o in outcomes if isinstance(o, AuthenticationFailedError)]
    assert (len(failed), len(busy)) == (_VERIFIER_QUEUE_MAX, 5)
    assert all(o.retry_after_ms > 0 for o in busy)
    assert gate.statistics().verifier_busy_count == 5
    # Once the queue drained, a new token is checked again.
    with pytest.raises(AuthenticationFailedError):
        await admit(f"{TOKEN_PREFIX}{'a' * 12}_{'z' * 43}")
    gate.close()


async def test_one_new_token_presented_by_many_calls_at_once_is_hashed_once(tmp_path):
    import asyncio

    token, line = _cheap_token("alice", "b" * 12)
    gate = CallGate(_policy(tmp_path, tokens=[line]))
    calls = await asyncio.gather(*(gate.admit("ListTopics", pb.ListTopicsRequest(), _bearer_context(token))
                                   for _ in range(40)))
    assert {call.principal for call in calls} == {"alice"}
    assert gate.statistics().tokens.slow_check_count == 1
    gate.close()


# -- revocation reaches open streams ---------------------------------------------------------------

_ACL_ALICE = '[[allow]]\nprincipals = ["alice"]\noperations = ["read", "write"]\ntopics = ["t"]\n'


def _reload(policy, tmp_path, *, tokens=None, acl=None):
    if tokens is not None:
        (tmp_path / "tokens").write_text("".join(tokens))
    if acl is not None:
        (tmp_path / "acl.toml").write_text(acl)
    policy.reload()


async def test_a_stream_message_after_its_token_is_removed_is_refused_unauthenticated(tmp_path):
    token, entry = create_token("alice")
    _, other = create_token("bob")
    policy = _policy(tmp_path, tokens=[format_entry(entry), format_entry(other)], acl=_ACL_ALICE)
    gate = CallGate(policy)
    stream = await gate.admit_stream("ProduceStream", _bearer_context(token))
    produce = pb.ProduceRequest(topic="t", records=b"x")
    gate.begin_message(stream, produce)
    gate.end_message(stream)
    _reload(policy, tmp_path, tokens=[format_entry(entry), format_entry(other)])  # nothing revoked
    gate.begin_message(stream, produce)
    gate.end_message(stream)
    _reload(policy, tmp_path, tokens=[format_entry(other)])
    with pytest.raises(AuthenticationFailedError, match="revoked"):
        gate.begin_message(stream, produce)
    assert gate.quotas.statistics().in_use_by_principal["alice"]["requests"] == 0
    assert gate.statistics().revoked_stream_count == 1
    stream.release()
    gate.close()


async def test_a_server_stream_checks_its_rights_again_before_each_write_after_a_reload(tmp_path):
    token, entry = create_token("alice")
    policy = _policy(tmp_path, tokens=[format_entry(entry)], acl=_ACL_ALICE)
    gate = CallGate(policy)
    consume = await gate.admit("Consume", pb.ConsumeRequest(topic="t"), _bearer_context(token))
    await consume.before_stream_write(10)
    _reload(policy, tmp_path, acl='[[allow]]\nprincipals = ["alice"]\noperations = ["read"]\n'
                                  'topics = ["other"]\n')
    with pytest.raises(PermissionDeniedError, match="'alice' is not allowed to read topic 't'"):
        await consume.before_stream_write(10)
    consume.release()
    consume = await gate.admit("Consume", pb.ConsumeRequest(topic="other"), _bearer_context(token))
    _reload(policy, tmp_path, tokens=[])
    with pytest.raises(AuthenticationFailedError, match="revoked"):
        await consume.before_stream_write(10)
    consume.release()
    gate.close()


# -- a reload between a slow check's answer and its delivery ---------------------------------------


class _PausingStore:
    """A token store whose first slow check, once answered (and cached), waits for the test
    before handing its answer back: a reload can land between the two, as a SIGHUP can."""

    @staticmethod
    def install(policy):
        import threading

        from seglog_server.security.token_store import TokenStore

        class Pausing(TokenStore):
            answered = threading.Event()
            deliver = threading.Event()

            def verify_entry(self, token):
                entry = super().verify_entry(token)
                if not self.deliver.is_set():
                    self.answered.set()
                    self.deliver.wait(10)
                return entry

        store = Pausing(policy.tokens._entries, 16)
        policy.tokens = store
        return store


@pytest.mark.parametrize("opens", ["unary", "stream"])
async def test_a_check_answered_before_a_reload_admits_no_caller_with_the_rotated_secret(tmp_path, opens):
    """alice's secret is rotated (same key id, new hash) while the first check of her old token
    is answered but not yet delivered. Neither the caller that started the check nor one that
    joins it after the reload may be admitted with the old secret."""
    import asyncio

    old, line = _cheap_token("alice", "e" * 12)
    policy = _policy(tmp_path, tokens=[line])
    store = _PausingStore.install(policy)
    gate = CallGate(policy)

    async def admit():
        if opens == "unary":
            return await gate.admit("ListTopics", pb.ListTopicsRequest(), _bearer_context(old))
        return await gate.admit_stream("ProduceStream", _bearer_context(old))

    first = asyncio.ensure_future(admit())
    await asyncio.get_running_loop().run_in_executor(None, store.answered.wait, 10)
    rotated = f"{TOKEN_PREFIX}{'e' * 12}_{'n' * 43}"
    _reload(policy, tmp_path, tokens=[format_entry(TokenEntry("alice", "e" * 12, hash_token(rotated, n=2)))])
    joined = asyncio.ensure_future(admit())
    for _ in range(3):
        await asyncio.sleep(0)  # the new caller reaches the check in flight
    store.deliver.set()
    outcomes = await asyncio.gather(first, joined, return_exceptions=True)
    assert [type(o) for o in outcomes] == [AuthenticationFailedError] * 2, outcomes
    # The rotated secret is admitted, and the old one stays refused, cached.
    call = await gate.admit("ListTopics", pb.ListTopicsRequest(), _bearer_context(rotated))
    assert call.principal == "alice"
    call.release()
    with pytest.raises(AuthenticationFailedError):
        await admit()
    gate.close()


async def test_a_failed_recheck_is_the_streams_end_logged_and_counted_once(tmp_path, caplog):
    token, entry = create_token("alice")
    policy = _policy(tmp_path, tokens=[format_entry(entry)], acl=_ACL_ALICE)
    gate = CallGate(policy)
    stream = await gate.admit_stream("ProduceStream", _bearer_context(token))
    _reload(policy, tmp_path, tokens=[])
    for _ in range(3):
        with pytest.raises(AuthenticationFailedError, match="revoked"):
            gate.recheck(stream)
    stats = gate.statistics()
    assert (stats.revoked_stream_count, stats.authentication_failure_count) == (1, 1)
    assert sum("authentication revoked" in r.message for r in caplog.records) == 1
    stream.release()
    gate.close()


async def test_a_stream_parked_at_the_tail_ends_at_the_reload_that_revokes_it(tmp_path):
    import asyncio

    token, entry = create_token("alice")
    policy = _policy(tmp_path, tokens=[format_entry(entry)], acl=_ACL_ALICE)
    gate = CallGate(policy)
    consume = await gate.admit("Consume", pb.ConsumeRequest(topic="t"), _bearer_context(token))
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)  # no append ever comes
    parked = asyncio.ensure_future(consume.park(lambda reloaded: waiters.wait_ticket(ticket, None, reloaded)))
    await asyncio.sleep(0)
    _reload(policy, tmp_path, acl=_ACL_ALICE)  # nothing revoked: it stays parked
    await asyncio.sleep(0)
    assert not parked.done()
    _reload(policy, tmp_path, tokens=[])
    with pytest.raises(AuthenticationFailedError, match="revoked"):
        await parked
    consume.release()
    gate.close()


async def test_a_stream_revoked_by_a_reload_just_before_it_parks_ends_at_once(tmp_path):
    # The reload lands between the stream's last check and its park (a Consume still building
    # its first response, say): the park must not wait for the reload after that one.
    import asyncio

    token, entry = create_token("alice")
    policy = _policy(tmp_path, tokens=[format_entry(entry)], acl=_ACL_ALICE)
    gate = CallGate(policy)
    consume = await gate.admit("Consume", pb.ConsumeRequest(topic="t"), _bearer_context(token))
    _reload(policy, tmp_path, tokens=[])  # before the park: no future is waiting yet
    waiters = AppendWaiters()
    ticket = waiters.ticket("t", 0)  # no append ever comes
    with pytest.raises(AuthenticationFailedError, match="revoked"):
        await asyncio.wait_for(consume.park(lambda reloaded: waiters.wait_ticket(ticket, None, reloaded)), timeout=10)
    consume.release()
    gate.close()


async def test_a_parked_stream_resumes_one_loop_turn_after_the_append_or_a_reload(tmp_path):
    # The append completes the waiter's own future: no task around the wait and no
    # asyncio.wait between it and the stream (three turns before), a reload or not meanwhile.
    import asyncio

    token, entry = create_token("alice")
    policy = _policy(tmp_path, tokens=[format_entry(entry)], acl=_ACL_ALICE)
    gate = CallGate(policy)
    consume = await gate.admit("Consume", pb.ConsumeRequest(topic="t"), _bearer_context(token))
    waiters = AppendWaiters()
    woken = []

    async def stream() -> None:
        ticket = waiters.ticket("t", 0)
        woken.append(await consume.park(lambda reloaded: waiters.wait_ticket(ticket, None, reloaded)))

    parked = asyncio.ensure_future(stream())
    await asyncio.sleep(0)
    _reload(policy, tmp_path, acl=_ACL_ALICE)  # nothing revoked: rechecked, parked again
    for _ in range(3):
        await asyncio.sleep(0)
    assert not parked.done() and waiters.statistics().waiting_count == 1
    waiters.notify("t", 0)
    await asyncio.sleep(0)
    assert woken == [True]
    await parked
    consume.release()
    gate.close()
