"""The token store's caches across a reload: what a SIGHUP keeps and what it forgets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.security.token_file import TOKEN_PREFIX, TokenEntry, hash_token
from seglog_server.security.token_store import TokenStore

_KEY_IDS = [f"{index:012x}" for index in range(1, 5)]


def _token(key_id: str, secret: str) -> str:
    return f"{TOKEN_PREFIX}{key_id}_{secret * 43}"


def _entry(principal: str, key_id: str, secret: str) -> TokenEntry:
    """A file line hashed with scrypt's smallest cost (n=2): the caches are under test."""
    return TokenEntry(principal, key_id, hash_token(_token(key_id, secret), n=2))


# A line per key id (or none): its principal and secret. At the reload, each line is kept as it
# is, given another principal or secret, or removed; a key id without a line may gain one.
_LINE = st.none() | st.tuples(st.sampled_from(["alice", "bob"]), st.sampled_from("ab"))
_CHANGE = st.sampled_from(["same", "principal", "secret", "gone"])


def _changed(line, change):
    if line is None or change == "gone":
        return ("carol", "a") if line is None and change == "secret" else None
    principal, secret = line
    if change == "principal":
        return ("bob" if principal == "alice" else "alice", secret)
    if change == "secret":
        return (principal, "b" if secret == "a" else "a")
    return line


@settings(max_examples=60, deadline=None)
@given(before=st.fixed_dictionaries({k: _LINE for k in _KEY_IDS}),
       changes=st.fixed_dictionaries({k: _CHANGE for k in _KEY_IDS}),
       presented=st.lists(st.tuples(st.sampled_from(_KEY_IDS), st.sampled_from("abc")), max_size=8))
def test_a_reload_keeps_exactly_the_acceptances_whose_line_is_unchanged(before, changes, presented):
    old = {k: _entry(v[0], k, v[1]) for k, v in before.items() if v}
    store = TokenStore(old, cache_max=64)
    for key_id, secret in presented:
        store.verify_entry(_token(key_id, secret))
    accepted = {(k, s) for k, s in presented if before[k] is not None and before[k][1] == s}
    refused = {(k, s) for k, s in presented if (k, s) not in accepted}
    after = {k: _changed(before[k], changes[k]) for k in _KEY_IDS}
    new = {k: old[k] if changes[k] == "same" else _entry(line[0], k, line[1])
           for k, line in after.items() if line}
    store.replace_entries(new)
    for key_id, secret in accepted:
        kept = store.cached_entry(_token(key_id, secret))
        assert kept == (old[key_id] if changes[key_id] == "same" else None)
    for key_id, secret in refused:  # a refused token may have become valid: decided again
        assert not store.cached_refusal(_token(key_id, secret))
    # What is still cached is answered without a hash, and is right under the new file.
    slow_before = store.statistics().slow_check_count
    for key_id, secret in accepted:
        if changes[key_id] == "same":
            assert store.verify_entry(_token(key_id, secret)) == new[key_id]
    assert store.statistics().slow_check_count == slow_before


def test_a_reload_that_changes_nothing_costs_a_known_caller_no_slow_check():
    line = _entry("alice", _KEY_IDS[0], "a")
    store = TokenStore({line.key_id: line}, cache_max=8)
    token = _token(line.key_id, "a")
    assert store.verify_entry(token) == line
    store.replace_entries({line.key_id: TokenEntry(line.principal, line.key_id, line.hash_text)})
    assert store.cached_entry(token) == line
    assert store.statistics().slow_check_count == 1
    assert store.generation == 1
