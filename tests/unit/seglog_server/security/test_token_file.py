import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.security import SecurityFileError, TokenStore
from seglog_server.security.token_file import (
    create_token,
    format_entry,
    hash_token,
    key_id_of,
    parse_token_file,
    verify_token_hash,
)

FAST_N = 2**4  # tests hash with a tiny cost factor where the cost is not what they test


def test_created_token_verifies_against_its_entry_and_the_entry_keeps_no_token():
    token, entry = create_token("alice")
    assert key_id_of(token) == entry.key_id
    assert token not in format_entry(entry)
    assert verify_token_hash(token, entry.hash_text)
    assert not verify_token_hash(token[:-1] + ("A" if token[-1] != "A" else "B"), entry.hash_text)


def test_the_file_round_trips_entries_by_key_id():
    tokens, text = [], "# comment\n\n"
    for name in ("alice", "bob"):
        token, entry = create_token(name)
        tokens.append(token)
        text += format_entry(entry)
    entries = parse_token_file(text)
    assert {e.principal for e in entries.values()} == {"alice", "bob"}
    assert set(entries) == {key_id_of(t) for t in tokens}


def test_salts_differ_so_equal_tokens_hash_differently():
    assert hash_token("seglog_0123456789ab_" + "x" * 43, n=FAST_N) != \
        hash_token("seglog_0123456789ab_" + "x" * 43, n=FAST_N)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("alice 0123456789ab", "NAME KEY_ID HASH"),
        ("al ice 0123456789ab scrypt$16$8$1$AAAAAAAAAAA=$" + "A" * 44, "NAME KEY_ID HASH"),
        ("alice XYZ scrypt$16$8$1$AAAAAAAAAAA=$" + "A" * 44, "key id"),
        ("alice 0123456789ab md5$abc", "scrypt"),
        ("alice 0123456789ab scrypt$3$8$1$AAAAAAAAAAA=$" + "A" * 44, "out of range"),
        ("alice 0123456789ab scrypt$1048576$32$16$AAAAAAAAAAA=$" + "A" * 44, "1 GiB"),
        ("bad/name 0123456789ab scrypt$16$8$1$AAAAAAAAAAA=$" + "A" * 44, "principal name"),
    ],
)
def test_malformed_lines_are_refused_naming_the_line(line, reason):
    with pytest.raises(SecurityFileError, match=f"line 2: .*{reason}"):
        parse_token_file("# header\n" + line + "\n")


def test_a_key_id_twice_is_refused():
    _, entry = create_token("alice")
    with pytest.raises(SecurityFileError, match="twice"):
        parse_token_file(format_entry(entry) * 2)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_text_parses_or_fails_with_security_file_error(text):
    try:
        parse_token_file(text)
    except SecurityFileError as exc:
        assert "line" in str(exc)


def test_store_hashes_each_token_once_and_caches_both_answers():
    token, entry = create_token("alice")
    store = TokenStore({entry.key_id: entry}, cache_max=8)
    assert store.verify(token) == "alice"
    assert store.verify(token) == "alice"
    assert store.cached(token) == (True, "alice")
    wrong = token[:-2] + "zz"
    assert store.verify(wrong) is None
    assert store.verify(wrong) is None
    assert store.statistics().slow_check_count == 2


def test_store_caches_are_bounded_and_refusals_never_evict_an_accepted_token():
    token, entry = create_token("alice")
    store = TokenStore({entry.key_id: entry}, cache_max=2)
    store.verify(token)
    key_part = token.rpartition("_")[0]
    for index in range(3):  # the known key id with wrong secrets: hashed and refused
        assert store.verify(f"{key_part}_{'A' * 40}{index:03d}") is None
    assert store.statistics().cached_count == 3  # one accepted, two refused (bounded)
    assert store.cached(token) == (True, "alice")
    store.replace_entries({})
    assert store.cached(token) == (False, None)
    assert store.verify(token) is None  # the line is gone from the file


def test_unknown_key_ids_and_malformed_tokens_are_refused_without_a_hash():
    token, entry = create_token("alice")
    store = TokenStore({entry.key_id: entry}, cache_max=4)
    other, _ = create_token("bob")  # well formed, but its key id is in no line
    for presented in (other, "not-a-token", "seglog_" + "x" * 300):
        assert not store.precheck(presented)
        assert store.verify(presented) is None
    assert store.statistics().slow_check_count == 0
    assert store.statistics().refused_without_hash_count == 6
    assert store.precheck(token)


class _ReloadedDuringCheck(TokenStore):
    """The interleaving under test, made certain: a SIGHUP lands while the slow hash runs."""

    def __init__(self, entries, cache_max, reload_to):
        super().__init__(entries, cache_max)
        self._reload_to = reload_to

    def _slow_check(self, token):
        matched = super()._slow_check(token)
        if self._reload_to is not None:
            reload_to, self._reload_to = self._reload_to, None
            self.replace_entries(reload_to)
        return matched


def test_a_token_revoked_while_its_first_check_runs_is_neither_accepted_nor_cached():
    token, entry = create_token("alice")
    store = _ReloadedDuringCheck({entry.key_id: entry}, 4, reload_to={})
    assert store.verify(token) is None
    assert store.cached(token) == (True, None)  # remembered as refused, under the new file
    assert store.cached_entry(token) is None


def test_a_check_across_an_unrelated_reload_is_decided_again_and_accepted():
    token, entry = create_token("alice")
    _, other = create_token("bob")
    store = _ReloadedDuringCheck({entry.key_id: entry}, 4,
                                 reload_to={entry.key_id: entry, other.key_id: other})
    assert store.verify(token) == "alice"
    assert store.statistics().slow_check_count == 2  # once per generation
    assert store.cached(token) == (True, "alice")
    assert store.still_valid(entry)
    store.replace_entries({other.key_id: other})
    assert not store.still_valid(entry)


def test_unknown_key_ids_and_oversized_values_verify_to_none():
    _, entry = create_token("alice")
    store = TokenStore({entry.key_id: entry}, cache_max=4)
    assert store.verify("seglog_ffffffffffff_" + "A" * 43) is None
    assert store.verify("x" * 10_000) is None
