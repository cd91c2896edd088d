"""Checks bearer tokens against the token file's hashes, with a bounded cache of the results.

A slow hash on every call would cost 0.1-0.2 s of CPU per RPC. So each presented token is first
reduced to a fast keyed digest (HMAC-SHA256 under a random key made at process start, never
stored), and the result of the slow check (the principal, or "no") is remembered under that
digest. The key makes the digest useless outside this process, and the cache never holds a token.
The cache is an LRU bounded by ``cache_max`` entries, so a client sending endless random tokens
evicts its own entries rather than growing memory; each of those still costs one slow hash, on
the verifier's own thread (``verify`` is blocking; the gate runs it off the event loop).

Unknown key ids cost one hash too (against a fixed dummy hash), so timing does not tell a
well-formed token with an unknown id from one with a wrong secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from .token_file import TOKEN_PREFIX, TokenEntry, hash_token, key_id_of, verify_token_hash

__all__ = ["TokenStore", "TokenStoreStatistics"]

# Bearer values longer than this are refused without hashing (a real token is 63 characters).
TOKEN_CHARS_MAX = 256


@dataclass(frozen=True)
class TokenStoreStatistics:
    token_count: int
    cached_count: int
    cache_hit_count: int
    slow_check_count: int


class TokenStore:
    def __init__(self, entries: Mapping[str, TokenEntry], cache_max: int) -> None:
        assert cache_max >= 1
        self._entries = dict(entries)
        self._cache_max = cache_max
        self._cache: OrderedDict[bytes, str | None] = OrderedDict()
        self._cache_key = secrets.token_bytes(32)
        self._lock = threading.Lock()  # the cache is touched from the verifier threads
        self._dummy_hash: str | None = None  # made at the first unknown key id
        self._hit_count = 0
        self._slow_count = 0

    def replace_entries(self, entries: Mapping[str, TokenEntry]) -> None:
        """A reloaded file: new entries, and a cache that forgets every earlier answer."""
        with self._lock:
            self._entries = dict(entries)
            self._cache.clear()

    def cached(self, token: str) -> tuple[bool, str | None]:
        """(known, principal): the remembered answer, without a slow hash; (False, None) if none."""
        digest = self._digest(token)
        with self._lock:
            if digest in self._cache:
                self._cache.move_to_end(digest)
                self._hit_count += 1
                return True, self._cache[digest]
        return False, None

    def verify(self, token: str) -> str | None:
        """The principal ``token`` authenticates as, or None. Blocking (one slow hash at most)."""
        known, principal = self.cached(token)
        if known:
            return principal
        principal = self._slow_check(token)
        digest = self._digest(token)
        with self._lock:
            self._cache[digest] = principal
            self._cache.move_to_end(digest)
            while len(self._cache) > self._cache_max:
                self._cache.popitem(last=False)
        return principal

    def statistics(self) -> TokenStoreStatistics:
        with self._lock:
            return TokenStoreStatistics(
                len(self._entries), len(self._cache), self._hit_count, self._slow_count
            )

    def _slow_check(self, token: str) -> str | None:
        if len(token) > TOKEN_CHARS_MAX:
            return None
        key_id = key_id_of(token)
        entry = self._entries.get(key_id) if key_id is not None else None
        with self._lock:
            self._slow_count += 1
        if entry is None:
            if self._dummy_hash is None:
                self._dummy_hash = hash_token(TOKEN_PREFIX + "0" * 12 + "_" + "0" * 43)
            verify_token_hash(token, self._dummy_hash)  # same cost as a real check
            return None
        return entry.principal if verify_token_hash(token, entry.hash_text) else None

    def _digest(self, token: str) -> bytes:
        return hmac.new(self._cache_key, token.encode("utf-8", "surrogateescape"), hashlib.sha256).digest()
