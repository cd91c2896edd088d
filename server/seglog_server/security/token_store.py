"""Checks bearer tokens against the token file's hashes, with bounded caches of the results.

A slow hash on every call would cost 0.1-0.2 s of CPU per RPC. So each presented token is first
reduced to a fast keyed digest (HMAC-SHA256 under a random key made at process start, never
stored), and the result of the slow check (the principal, or "no") is remembered under that
digest. The key makes the digest useless outside this process, and the caches never hold a token.

The cheap checks come first (``precheck``): a token that is not well formed, or whose key id
names no line of the file, is refused at once, without a hash. Key ids are not secret (they name
a line, like a user name), so answering an unknown one faster than a wrong secret tells a caller
nothing it could not read off any token; and it means a flood of made-up tokens costs a regex
and a dict lookup each, not a slow hash. Only a token with a known key id and a secret not seen
before is hashed, on the verifier's own thread (``verify`` is blocking; the gate runs it off the
event loop, with a bounded queue).

Accepted and refused answers are cached apart, each an LRU of ``cache_max`` entries: wrong
secrets sent in bulk evict each other, never a valid token's entry, so a caller whose token is
cached keeps costing a digest per call whatever else arrives.

A reload (``replace_entries``) keeps the acceptances whose line is unchanged, forgets the rest and
every refusal, and moves ``generation`` on. A check that was
hashing when the reload landed is not cached and is decided again against the new entries, so a
token removed by SIGHUP is never remembered as valid (``verify``). ``still_valid`` answers, for an
open stream, whether the entry it authenticated with is still in the file.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from .token_file import TokenEntry, key_id_of, verify_token_hash

__all__ = ["SLOW_CHECKS_BUSY_RETRY_MS", "SLOW_CHECKS_MAX", "TokenStore", "TokenStoreStatistics"]

# Bearer values longer than this are refused without hashing (a real token is 63 characters).
TOKEN_CHARS_MAX = 256
# Slow checks running or queued at once, across every port that checks tokens (gRPC's call gate
# and the metrics endpoint share this bound); beyond it, a new token is refused before any hash.
# 16: at ~0.15 s a hash on two threads the last one waits about 1.2 s, a patient client's timeout
# at most; a larger bound only makes every new caller wait longer behind a flood.
SLOW_CHECKS_MAX = 16
# The hint a caller refused for a full bound gets: about the time the full bound takes to drain.
SLOW_CHECKS_BUSY_RETRY_MS = 1000
# A reload during a slow check sends it round again; more reloads than this during one check
# (each a SIGHUP) answer "no": the caller retries against a settled file.
_RELOAD_RETRIES_MAX = 3


@dataclass(frozen=True)
class TokenStoreStatistics:
    token_count: int
    cached_count: int  # accepted and refused answers held
    cache_hit_count: int
    slow_check_count: int
    refused_without_hash_count: int = 0  # malformed tokens, unknown key ids
    generation: int = 0  # reloads so far


class TokenStore:
    def __init__(self, entries: Mapping[str, TokenEntry], cache_max: int,
                 slow_checks_max: int = SLOW_CHECKS_MAX) -> None:
        assert cache_max >= 1 and slow_checks_max >= 1
        # The bound on slow checks, taken without waiting (``begin_slow_check``) from the event
        # loop and from the metrics endpoint's threads alike.
        self._slow_slots = threading.BoundedSemaphore(slow_checks_max)
        self.slow_checks_max = slow_checks_max
        self._entries = dict(entries)
        self._cache_max = cache_max
        self._accepted: OrderedDict[bytes, TokenEntry] = OrderedDict()
        self._refused: OrderedDict[bytes, None] = OrderedDict()
        self._cache_key = secrets.token_bytes(32)
        self._lock = threading.Lock()  # the caches are touched from the verifier threads
        self._generation = 0
        self._hit_count = 0
        self._slow_count = 0
        self._refused_cheaply_count = 0

    @property
    def generation(self) -> int:
        """Moves on at every reload: an answer given under an older one may be out of date."""
        return self._generation

    def replace_entries(self, entries: Mapping[str, TokenEntry]) -> None:
        """A reloaded file: new entries. An acceptance is kept while its line is unchanged (the
        same principal, key id and hash: the same answer), so a reload costs known callers no
        slow check; one whose line changed or went is forgotten, and so is every refusal (a
        refused token may have become valid)."""
        with self._lock:
            self._entries = dict(entries)
            stale = [digest for digest, entry in self._accepted.items()
                     if self._entries.get(entry.key_id) != entry]
            for digest in stale:
                del self._accepted[digest]
            self._refused.clear()
            self._generation += 1

    def cached(self, token: str) -> tuple[bool, str | None]:
        """(known, principal): the remembered answer, without a slow hash; (False, None) if none."""
        entry = self.cached_entry(token)
        if entry is None:
            return (True, None) if self.cached_refusal(token) else (False, None)
        return True, entry.principal

    def cached_entry(self, token: str) -> TokenEntry | None:
        """The file entry a cached, accepted ``token`` matched; None if not cached as accepted."""
        digest = self._digest(token)
        with self._lock:
            entry = self._accepted.get(digest)
            if entry is not None:
                self._accepted.move_to_end(digest)
                self._hit_count += 1
            return entry

    def precheck(self, token: str) -> bool:
        """Whether ``token`` could be valid at all: well formed, with a key id in the file. No
        hash; False means refuse now."""
        key_id = key_id_of(token) if len(token) <= TOKEN_CHARS_MAX else None
        if key_id is not None and key_id in self._entries:
            return True
        with self._lock:
            self._refused_cheaply_count += 1
        return False

    def verify(self, token: str) -> str | None:
        """The principal ``token`` authenticates as, or None. Blocking (one slow hash at most)."""
        entry = self.verify_entry(token)
        return entry.principal if entry is not None else None

    def verify_entry(self, token: str) -> TokenEntry | None:
        """The file entry ``token`` matches, or None. Blocking (one slow hash at most, more only
        if the file is reloaded while it runs)."""
        entry = self.cached_entry(token)
        if entry is not None or self.cached_refusal(token) or not self.precheck(token):
            return entry
        digest = self._digest(token)
        for _ in range(_RELOAD_RETRIES_MAX):
            generation = self._generation
            matched = self._slow_check(token)
            with self._lock:
                if generation != self._generation:
                    continue  # reloaded meanwhile: decide again against the new entries
                self._remember(digest, matched)
            return matched
        return None

    def begin_slow_check(self) -> bool:
        """Takes one of the ``slow_checks_max`` slot for a slow check, without waiting; False when
        all are taken (refuse the new token: ``AuthenticationBusyError``). ``end_slow_check``
        gives it back once the check answered."""
        return self._slow_slots.acquire(blocking=False)

    def end_slow_check(self) -> None:
        self._slow_slots.release()

    def still_valid(self, entry: TokenEntry) -> bool:
        """Whether ``entry`` (one ``verify_entry`` returned) is still a line of the file."""
        return self._entries.get(entry.key_id) == entry

    def statistics(self) -> TokenStoreStatistics:
        with self._lock:
            return TokenStoreStatistics(
                len(self._entries), len(self._accepted) + len(self._refused), self._hit_count,
                self._slow_count, self._refused_cheaply_count, self._generation,
            )

    def cached_refusal(self, token: str) -> bool:
        """Whether ``token`` was checked and refused before (and not forgotten since)."""
        digest = self._digest(token)
        with self._lock:
            if digest not in self._refused:
                return False
            self._refused.move_to_end(digest)
            self._hit_count += 1
            return True

    def _remember(self, digest: bytes, entry: TokenEntry | None) -> None:
        """Under the lock: the answer into its own LRU (refusals never evict acceptances)."""
        cache: OrderedDict = self._accepted if entry is not None else self._refused
        cache[digest] = entry
        cache.move_to_end(digest)
        while len(cache) > self._cache_max:
            cache.popitem(last=False)

    def _slow_check(self, token: str) -> TokenEntry | None:
        key_id = key_id_of(token)
        entry = self._entries.get(key_id) if key_id is not None else None
        with self._lock:
            self._slow_count += 1
        if entry is None:  # removed by a reload since ``precheck``
            return None
        return entry if verify_token_hash(token, entry.hash_text) else None

    def _digest(self, token: str) -> bytes:
        return hmac.new(self._cache_key, token.encode("utf-8", "surrogateescape"), hashlib.sha256).digest()
