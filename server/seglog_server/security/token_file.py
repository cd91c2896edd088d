"""The token file (``--auth-tokens FILE``): bearer tokens stored as slow, salted hashes.

A token as a client sends it (``authorization: Bearer <token>``)::

    seglog_<key id>_<secret>
        key id   12 lowercase hex digits, random; names the file line, so checking a token costs
                 one hash, not one per line. Not secret.
        secret   43 URL-safe base64 characters: 32 random bytes from ``secrets``.

The file, one token per line (``#`` starts a comment; blank lines are ignored)::

    # NAME  KEY_ID        HASH
    alice   3f9a0c1b2d4e  scrypt$16384$8$1$<salt, base64>$<digest, base64>

NAME is the principal the token authenticates as (the name ACL rules and quotas use): 1 to 128
characters from ``[A-Za-z0-9._@=-]``. One NAME may have several tokens (rotation: add the new
one, move the clients, delete the old line, SIGHUP). HASH is ``hashlib.scrypt`` of the whole token
with a 16-byte random salt and the parameters written in it (n, r, p), so they can be raised
later without invalidating old lines. ``seglog token create NAME --file FILE`` appends a line and
prints the token once; the file keeps only the hash.

Why scrypt with n=2**14, r=8, p=1 (16 MiB, ~0.1-0.2 s here): the secrets are 256-bit random, so
even a fast hash could not be brute-forced; the slow hash is defence in depth for a leaked file
(someone who pastes a weaker secret by hand), and verified tokens are cached (``token_store``), so
its cost is paid once per token per process, not per call.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from .errors import SecurityFileError

__all__ = [
    "SCRYPT_N",
    "TOKEN_PREFIX",
    "TokenEntry",
    "create_token",
    "format_entry",
    "hash_token",
    "key_id_of",
    "parse_token_file",
    "verify_token_hash",
]

TOKEN_PREFIX = "seglog_"
KEY_ID_HEX_DIGITS = 12
SECRET_BYTES = 32
SALT_BYTES = 16
DIGEST_BYTES = 32
# scrypt cost: n=2**14, r=8 uses 128 * r * n = 16 MiB per hash; see the module docstring.
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
# Parameters read from a file are bounded: a hostile or mistyped line must not ask for gigabytes.
_SCRYPT_N_MAX = 2**20
_SCRYPT_MEMORY_BYTES_MAX = 1024 * 1024 * 1024
# Token lines longer than this are refused before parsing (a real line is ~140 characters).
_LINE_CHARS_MAX = 1024

PRINCIPAL_NAME = re.compile(r"[A-Za-z0-9._@=-]{1,128}")
_KEY_ID = re.compile(rf"[0-9a-f]{{{KEY_ID_HEX_DIGITS}}}")
_TOKEN = re.compile(rf"{TOKEN_PREFIX}([0-9a-f]{{{KEY_ID_HEX_DIGITS}}})_[A-Za-z0-9_-]{{20,128}}")


@dataclass(frozen=True)
class TokenEntry:
    principal: str
    key_id: str
    hash_text: str  # scrypt$n$r$p$salt$digest


def key_id_of(token: str) -> str | None:
    """The key id of a well-formed token, or None."""
    match = _TOKEN.fullmatch(token)
    return match.group(1) if match else None


def hash_token(token: str, *, salt: bytes | None = None, n: int = SCRYPT_N) -> str:
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = _scrypt(token.encode(), salt, n, SCRYPT_R, SCRYPT_P)
    return "$".join(("scrypt", str(n), str(SCRYPT_R), str(SCRYPT_P), _b64(salt), _b64(digest)))


def verify_token_hash(token: str, hash_text: str) -> bool:
    """Whether ``token`` hashes to ``hash_text``; the digests are compared in constant time."""
    n, r, p, salt, digest = _parse_hash(hash_text)
    return hmac.compare_digest(_scrypt(token.encode(), salt, n, r, p), digest)


def create_token(principal: str) -> tuple[str, TokenEntry]:
    """A new random token and its file entry (the token itself is not kept anywhere)."""
    _check_principal(principal)
    key_id = secrets.token_hex(KEY_ID_HEX_DIGITS // 2)
    token = f"{TOKEN_PREFIX}{key_id}_{secrets.token_urlsafe(SECRET_BYTES)}"
    return token, TokenEntry(principal, key_id, hash_token(token))


def format_entry(entry: TokenEntry) -> str:
    return f"{entry.principal} {entry.key_id} {entry.hash_text}\n"


def parse_token_file(text: str) -> dict[str, TokenEntry]:
    """Entries by key id. Raises SecurityFileError naming the line (never the token or path)."""
    entries: dict[str, TokenEntry] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line) > _LINE_CHARS_MAX:
            raise SecurityFileError(f"token file line {number}: longer than {_LINE_CHARS_MAX}")
        fields = line.split()
        if len(fields) != 3:
            raise SecurityFileError(f"token file line {number}: expected NAME KEY_ID HASH")
        principal, key_id, hash_text = fields
        try:
            _check_principal(principal)
            if not _KEY_ID.fullmatch(key_id):
                raise ValueError(f"key id must be {KEY_ID_HEX_DIGITS} lowercase hex digits")
            _parse_hash(hash_text)
        except ValueError as exc:
            raise SecurityFileError(f"token file line {number}: {exc}") from None
        if key_id in entries:
            raise SecurityFileError(f"token file line {number}: key id {key_id} appears twice")
        entries[key_id] = TokenEntry(principal, key_id, hash_text)
    return entries


def _check_principal(name: str) -> None:
    if not PRINCIPAL_NAME.fullmatch(name):
        raise ValueError(f"principal name must be 1-128 characters of [A-Za-z0-9._@=-], found {name!r}")


def _parse_hash(hash_text: str) -> tuple[int, int, int, bytes, bytes]:
    parts = hash_text.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise ValueError("hash must be scrypt$N$R$P$SALT$DIGEST")
    try:
        n, r, p = (int(part) for part in parts[1:4])
        salt, digest = base64.b64decode(parts[4], validate=True), base64.b64decode(parts[5], validate=True)
    except ValueError:
        raise ValueError("hash has a malformed number or base64 field") from None
    if not (2 <= n <= _SCRYPT_N_MAX and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16):
        raise ValueError(f"scrypt parameters out of range: n={n} r={r} p={p}")
    if 128 * r * n * p > _SCRYPT_MEMORY_BYTES_MAX:
        raise ValueError("scrypt parameters need more than 1 GiB")
    if len(salt) < 8 or len(digest) != DIGEST_BYTES:
        raise ValueError(f"salt must be >= 8 bytes and digest {DIGEST_BYTES} bytes")
    return n, r, p, salt, digest


def _scrypt(secret: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    # maxmem: OpenSSL's default (32 MiB) refuses r=8 above n=2**14; allow what _parse_hash allows.
    return hashlib.scrypt(secret, salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MEMORY_BYTES_MAX + 1024 * 1024,
                          dklen=DIGEST_BYTES)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
