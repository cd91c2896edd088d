"""The S3 boundary: one thin class over a botocore client, and the one table that turns its
errors into storage errors.

Everything the remote tier does to the store goes through ``ObjectStore``'s five calls (put,
get, head, list, delete), so every error is translated here, once (httpx's
``map_httpcore_exceptions``), and every call runs under the same deadline: botocore's connect and
read timeouts per attempt, a bounded number of attempts. A store that is down, paused or answering
5xx therefore fails a call with ``RemoteStorageUnavailableError`` naming the endpoint after at most
``attempts_max * (connect_timeout_s + read_timeout_s)``, never hangs.

Credentials come from botocore's own chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_SHARED_CREDENTIALS_FILE``, a profile): never from an argument, so never from a command line.

Sizes are checked before anything is allocated: a GET reads ``Content-Length`` first and refuses
a body above the caller's ``size_max`` (or a ranged answer of the wrong length) without reading it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import boto3
import botocore.config
import botocore.exceptions

from ..base.errors import (
    CorruptRemoteObjectError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageUnavailableError,
)

__all__ = ["STORE_OPERATIONS", "ObjectStore", "ObjectStoreConfig"]

# Error codes an S3 store answers when it is overloaded or failing inside: the call may succeed
# later, so they are retriable (AWS's own retry guidance names these; SeaweedFS uses the same).
_RETRIABLE_CODES = frozenset({
    "InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "RequestTimeTooSkewed",
    "503", "500", "502", "504",
})
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "404"})

# The store calls ObjectStore makes, each counted in ``error_counts`` when it fails.
STORE_OPERATIONS = ("PUT", "GET", "HEAD", "LIST", "DELETE", "CREATE-BUCKET")

# A DeleteObjects request takes at most 1000 keys (the S3 API's limit).
_DELETE_BATCH_MAX = 1000


@dataclass(frozen=True)
class ObjectStoreConfig:
    """Where the store is and how long a call may take.

    ``connect_timeout_s`` and ``read_timeout_s`` bound each attempt (the read timeout is the
    longest silence tolerated while waiting for bytes); ``attempts_max`` bounds the attempts,
    retries included. The defaults give a stalled store at most 3 * (2 + 10) = 36 s; remote reads
    on the request path pass a tighter config.
    """

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str = "us-east-1"
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 10.0
    attempts_max: int = 3
    # Uploads stream from the segment's file; S3's single PUT takes up to 5 GiB, above any
    # segment.bytes seglog accepts (1 GiB), so no multipart upload is needed.
    put_bytes_max: int = 5 * 1024**3

    def __post_init__(self) -> None:
        assert self.bucket, "a bucket is required"
        assert self.connect_timeout_s > 0 and self.read_timeout_s > 0
        assert self.attempts_max >= 1

    def for_reads(self, deadline_s: float) -> ObjectStoreConfig:
        """The same store for reads on the request path: one attempt, connecting and each silence
        bounded by ``deadline_s`` (a consumer's retry is its own; the uploader's three attempts
        would hold a Fetch up to 36 s)."""
        assert deadline_s > 0, deadline_s
        return dataclasses.replace(self, connect_timeout_s=min(self.connect_timeout_s, deadline_s),
                                   read_timeout_s=deadline_s, attempts_max=1)


class ObjectStore:
    """Put, get (ranged), head, list and delete objects under ``config.prefix``; keys passed in are
    relative to it. Thread-safe (botocore clients are); every call is synchronous and bounded."""

    def __init__(self, config: ObjectStoreConfig) -> None:
        self.config = config
        self._endpoint = config.endpoint_url or f"s3 in {config.region}"
        # Failed calls by operation (PUT, GET, HEAD, LIST, DELETE, CREATE-BUCKET), for metrics.
        self.error_counts: dict[str, int] = dict.fromkeys(STORE_OPERATIONS, 0)
        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=config.endpoint_url,
            region_name=config.region,
            config=botocore.config.Config(
                connect_timeout=config.connect_timeout_s,
                read_timeout=config.read_timeout_s,
                retries={"total_max_attempts": config.attempts_max, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        )

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def full_key(self, key: str) -> str:
        return f"{self.config.prefix.strip('/')}/{key}" if self.config.prefix.strip("/") else key

    # -- writes -------------------------------------------------------------------------------
    def put(self, key: str, body: bytes | BinaryIO, size_bytes: int, *, create_only: bool) -> None:
        """Store ``size_bytes`` from ``body`` at ``key``. ``create_only`` makes the PUT conditional
        (``If-None-Match: *``): an existing object is never overwritten, the call fails instead."""
        if size_bytes > self.config.put_bytes_max:
            raise RemoteStorageError(
                f"object {self.full_key(key)!r} of {size_bytes} bytes is above the single-PUT "
                f"limit of {self.config.put_bytes_max} bytes")
        extra = {"IfNoneMatch": "*"} if create_only else {}
        with _translated(self, "PUT", key):
            self._client.put_object(Bucket=self.config.bucket, Key=self.full_key(key), Body=body,
                                    ContentLength=size_bytes, **extra)

    def delete(self, keys: list[str]) -> None:
        """Delete ``keys`` (absent ones are not an error, as in S3)."""
        for start in range(0, len(keys), _DELETE_BATCH_MAX):
            batch = keys[start:start + _DELETE_BATCH_MAX]
            with _translated(self, "DELETE", batch[0]):
                answer = self._client.delete_objects(Bucket=self.config.bucket, Delete={
                    "Objects": [{"Key": self.full_key(k)} for k in batch], "Quiet": True})
            failed = answer.get("Errors") or []
            if failed:
                first = failed[0]
                raise _error_for_code(self, "DELETE", first.get("Key", batch[0]),
                                      first.get("Code", ""), first.get("Message", ""))

    # -- reads --------------------------------------------------------------------------------
    def get(self, key: str, size_max: int, first: int | None = None, last: int | None = None) -> bytes:
        """The object's bytes, or bytes ``first..last`` inclusive (a ranged GET). Refuses, before
        reading the body, an object above ``size_max`` or a ranged answer of another length."""
        assert size_max >= 0
        extra = {}
        if first is not None:
            assert last is not None and 0 <= first <= last, (first, last)
            if last - first + 1 > size_max:
                raise CorruptRemoteObjectError(
                    f"range {first}..{last} of {self.full_key(key)!r} is above the "
                    f"{size_max}-byte limit of this read")
            extra["Range"] = f"bytes={first}-{last}"
        with _translated(self, "GET", key):
            answer = self._client.get_object(Bucket=self.config.bucket, Key=self.full_key(key), **extra)
            length = int(answer["ContentLength"])
            body = answer["Body"]
            try:
                _check_length(self.full_key(key), length, size_max, first, last)
                data = body.read(length + 1)
            finally:
                body.close()
        if len(data) != length:
            raise CorruptRemoteObjectError(
                f"object {self.full_key(key)!r}: expected {length} bytes (Content-Length), "
                f"read {len(data)}")
        return data

    def size_of(self, key: str) -> int:
        with _translated(self, "HEAD", key):
            answer = self._client.head_object(Bucket=self.config.bucket, Key=self.full_key(key))
        return int(answer["ContentLength"])

    def list(self, key_prefix: str) -> Iterator[str]:
        """Keys (relative to the store's prefix) that start with ``key_prefix``, in key order."""
        paginator = self._client.get_paginator("list_objects_v2")
        strip = len(self.full_key(""))
        with _translated(self, "LIST", key_prefix):
            pages = list(paginator.paginate(Bucket=self.config.bucket,
                                            Prefix=self.full_key(key_prefix)))
        for page in pages:
            for item in page.get("Contents") or []:
                yield item["Key"][strip:]

    def create_bucket(self) -> None:
        """Create the bucket (tests and first runs); an existing one of ours is fine."""
        with _translated(self, "CREATE-BUCKET", ""):
            try:
                self._client.create_bucket(Bucket=self.config.bucket)
            except botocore.exceptions.ClientError as e:
                if _code_of(e) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise


def _check_length(key: str, length: int, size_max: int, first: int | None, last: int | None) -> None:
    if length > size_max:
        raise CorruptRemoteObjectError(
            f"object {key!r} holds {length} bytes, above the {size_max}-byte limit of this read")
    if first is not None and last is not None and length != last - first + 1:
        # A store may shorten a range that runs past the end; callers ask only for bytes the
        # segment's metadata says exist, so a short answer means the object is not what it says.
        raise CorruptRemoteObjectError(
            f"object {key!r}: range {first}..{last} answered {length} bytes, "
            f"expected {last - first + 1}")


# -- the one translation table -----------------------------------------------------------------
def _code_of(error: botocore.exceptions.ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _status_of(error: botocore.exceptions.ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _error_for_code(store: ObjectStore, op: str, key: str, code: str, message: str,
                    status: int = 0) -> RemoteStorageError:
    where = f"{op} {store.full_key(key)!r} at {store.endpoint} (bucket {store.config.bucket!r})"
    if code in _RETRIABLE_CODES or status >= 500:
        return RemoteStorageUnavailableError(
            f"object store unavailable: {where} answered {code or status} {message}".rstrip())
    if code in _NOT_FOUND_CODES or status == 404:
        return RemoteResourceNotFoundError(f"not found: {where} ({code or status})")
    if code == "PreconditionFailed" or status == 412:
        return RemoteStorageError(f"{where}: the object already exists (keys are never reused)")
    return RemoteStorageError(f"{where} failed: {code or status} {message}".rstrip())


class _translated:
    """``with _translated(store, op, key):`` turns botocore's exceptions into storage errors."""

    def __init__(self, store: ObjectStore, op: str, key: str) -> None:
        self._store, self._op, self._key = store, op, key

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        if error is None:
            return False
        counts = self._store.error_counts
        counts[self._op] = counts.get(self._op, 0) + 1  # one writer per key at a time is enough
        if isinstance(error, RemoteStorageError):
            return False
        store, op, key = self._store, self._op, self._key
        where = f"{op} {store.full_key(key)!r} at {store.endpoint}"
        if isinstance(error, botocore.exceptions.ClientError):
            raise _error_for_code(store, op, key, _code_of(error),
                                  error.response.get("Error", {}).get("Message", ""),
                                  _status_of(error)) from error
        if isinstance(error, (botocore.exceptions.HTTPClientError,
                              botocore.exceptions.ConnectionError)):
            # Refused, reset, DNS, connect or read timeout: every attempt failed within its
            # deadline; the store may come back.
            raise RemoteStorageUnavailableError(
                f"object store unavailable: {where}: {type(error).__name__}: {error}") from error
        if isinstance(error, botocore.exceptions.NoCredentialsError):
            raise RemoteStorageError(
                f"no credentials for the object store at {store.endpoint}: set AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY or AWS_SHARED_CREDENTIALS_FILE") from error
        if isinstance(error, botocore.exceptions.BotoCoreError):
            raise RemoteStorageError(f"{where} failed: {error}") from error
        if isinstance(error, OSError):
            # Reading a body can fail below botocore (a reset mid-stream).
            raise RemoteStorageUnavailableError(
                f"object store unavailable: {where}: {os.strerror(error.errno) if error.errno else error}"
            ) from error
        return False
