"""A snapshot in an S3-compatible object store (CLEANING-CONTRACT.md, "The snapshot in an object
store"): the cleaning job's reads and writes when it cannot see the service's disk.

    s3://BUCKET/<prefix>/cleaning-snapshots/<id>/manifest.json        by the service, last
    s3://BUCKET/<prefix>/cleaning-snapshots/<id>/<base>.log           by the service
    s3://BUCKET/<prefix>/cleaning-snapshots/<id>/.work/<range>.keys|.part   the job's scratch
    s3://BUCKET/<prefix>/cleaning-snapshots/<id>/cleaned/<base>.log|.index|.timeindex
    s3://BUCKET/<prefix>/cleaning-snapshots/<id>/result.json          by the job, last

``StoreSnapshot`` names one such directory and talks to it through boto3, one client per process
(executors make their own: a client is not picklable). Credentials come from boto3's chain, as
the service takes them (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_SHARED_CREDENTIALS_FILE``, a profile): never from an argument. Errors become
``StoreError`` naming the operation, the key and the endpoint.

Executors see no shared directory: ``local_view`` gives each Python worker a private scratch copy
of the snapshot's layout in which only the byte ranges a task fetched (ranged GETs) are present,
as sparse files, so the scan, rewrite and assemble steps run unchanged on local paths.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass

from .errors import CleanerError
from .snapshot import CLEANED_DIR, MANIFEST_FILE, RESULT_FILE, Snapshot

__all__ = [
    "WORK_DIR", "StoreError", "StoreSnapshot", "clean_downloaded", "download_snapshot", "fetch_range", "local_view",
]

WORK_DIR = ".work"  # the job's scratch objects between its steps, removed before result.json
# Reads and copies go in pieces this large: a segment never sits in memory whole, and one
# request's fixed cost (a round trip) is noise beside 8 MiB.
CHUNK_BYTES = 8 * 1024 * 1024
MANIFEST_BYTES_MAX = 64 * 1024 * 1024  # as snapshot.py's limit for a manifest file
# Each call: connect within 5 s, no silence above 30 s, 3 attempts (botocore's standard retries
# of 5xx and throttling): a store that is down fails a task within about 2 minutes, never hangs.
_CONNECT_TIMEOUT_S = 5.0
_READ_TIMEOUT_S = 30.0
_ATTEMPTS_MAX = 3

_clients: dict[tuple[str | None, str], object] = {}
_clients_lock = threading.Lock()


class StoreError(CleanerError):
    """The object store failed or refused a call, or an object is not what the snapshot says."""


@dataclass(frozen=True)
class StoreSnapshot:
    """``s3://BUCKET/KEY_PREFIX/`` at ``endpoint_url`` (None: AWS S3)."""

    bucket: str
    key_prefix: str  # ends with "/"
    endpoint_url: str | None = None
    region: str = "us-east-1"

    @classmethod
    def parse(cls, url: str, endpoint_url: str | None = None) -> StoreSnapshot:
        if not url.startswith("s3://"):
            raise StoreError(f"expected a snapshot URL s3://BUCKET/PREFIX/, found {url!r}")
        bucket, _, key = url[len("s3://"):].partition("/")
        key = key.strip("/")
        if not bucket or not key:
            raise StoreError(f"expected a snapshot URL s3://BUCKET/PREFIX/, found {url!r}")
        return cls(bucket, key + "/", endpoint_url or None)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key_prefix}"

    @property
    def snapshot_id(self) -> str:
        return self.key_prefix.rstrip("/").rsplit("/", 1)[-1]

    # -- the client ------------------------------------------------------------------------------
    def _client(self):
        key = (self.endpoint_url, self.region)
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                import boto3
                import botocore.config

                client = boto3.session.Session().client(
                    "s3", endpoint_url=self.endpoint_url, region_name=self.region,
                    config=botocore.config.Config(
                        connect_timeout=_CONNECT_TIMEOUT_S, read_timeout=_READ_TIMEOUT_S,
                        retries={"total_max_attempts": _ATTEMPTS_MAX, "mode": "standard"},
                        s3={"addressing_style": "path"}),
                )
                _clients[key] = client
        return client

    def _call(self, op: str, name: str, fn, **kwargs):
        try:
            return fn(Bucket=self.bucket, Key=self.key_prefix + name, **kwargs)
        except Exception as exc:  # noqa: BLE001 - botocore's errors, translated once, here
            raise StoreError(
                f"{op} s3://{self.bucket}/{self.key_prefix}{name} at {self.endpoint_url or 'AWS S3'} "
                f"failed: {type(exc).__name__}: {exc}") from exc

    # -- objects ---------------------------------------------------------------------------------
    def size_of(self, name: str) -> int:
        return int(self._call("HEAD", name, self._client().head_object)["ContentLength"])

    def get(self, name: str, first: int | None = None, last: int | None = None, *, size_max: int) -> bytes:
        """The object (or bytes ``first..last`` inclusive); refuses an answer of another length
        than asked, or above ``size_max``, before reading it."""
        extra = {} if first is None else {"Range": f"bytes={first}-{last}"}
        answer = self._call("GET", name, self._client().get_object, **extra)
        length = int(answer["ContentLength"])
        body = answer["Body"]
        try:
            if length > size_max or (first is not None and length != last - first + 1):
                raise StoreError(f"GET s3://{self.bucket}/{self.key_prefix}{name}: {length} bytes answered, "
                                 f"expected {'at most ' + str(size_max) if first is None else last - first + 1}")
            data = body.read()
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - a connection lost mid-body
            raise StoreError(f"GET s3://{self.bucket}/{self.key_prefix}{name}: {type(exc).__name__}: {exc}") from exc
        finally:
            body.close()
        if len(data) != length:
            raise StoreError(f"GET s3://{self.bucket}/{self.key_prefix}{name}: read {len(data)} of {length} bytes")
        return data

    def put(self, name: str, data: bytes) -> None:
        self._call("PUT", name, self._client().put_object, Body=data, ContentLength=len(data))

    def put_file(self, name: str, path: str) -> None:
        size = os.path.getsize(path)
        with open(path, "rb") as body:
            self._call("PUT", name, self._client().put_object, Body=body, ContentLength=size)

    def download(self, name: str, path: str, size: int) -> None:
        """The object, which must be ``size`` bytes, into a new file at ``path``, by ranged GETs."""
        found = self.size_of(name)
        if found != size:
            raise StoreError(f"s3://{self.bucket}/{self.key_prefix}{name} is {found} bytes, the manifest says {size}")
        with open(path, "wb") as out:
            for first in range(0, size, CHUNK_BYTES):
                last = min(size, first + CHUNK_BYTES) - 1
                out.write(self.get(name, first, last, size_max=last - first + 1))

    def delete_under(self, sub_prefix: str) -> None:
        """Every object under ``<snapshot>/<sub_prefix>`` (absent ones are fine)."""
        client = self._client()
        try:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.key_prefix + sub_prefix)
            keys = [item["Key"] for page in pages for item in page.get("Contents") or []]
            for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
                client.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": k} for k in keys[start:start + 1000]], "Quiet": True})
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"DELETE s3://{self.bucket}/{self.key_prefix}{sub_prefix}*: "
                             f"{type(exc).__name__}: {exc}") from exc


def download_snapshot(store: StoreSnapshot, directory: str) -> str:
    """The manifest and every segment into ``directory/<snapshot id>/`` (a local snapshot the
    planner reads and checks: sizes and CRC-32C against the manifest, batch headers)."""
    from .snapshot import read_snapshot

    path = os.path.join(directory, store.snapshot_id)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    manifest = store.get(MANIFEST_FILE, size_max=MANIFEST_BYTES_MAX)
    with open(os.path.join(path, MANIFEST_FILE), "wb") as f:
        f.write(manifest)
    for segment in read_snapshot(path).segments:
        store.download(segment.file, os.path.join(path, segment.file), segment.size_bytes)
    return path


def local_view(snapshot: Snapshot) -> Snapshot:
    """The snapshot re-rooted at this worker process's scratch directory (created on first use)."""
    path = os.path.join(tempfile.gettempdir(), f"seglog-clean-{snapshot.snapshot_id}-{os.getpid()}")
    os.makedirs(os.path.join(path, CLEANED_DIR), exist_ok=True)
    return dataclasses.replace(snapshot, path=path)


def fetch_range(store: StoreSnapshot, snapshot: Snapshot, segment_index: int, start: int, end: int) -> str:
    """Bytes [start, end) of a segment, by ranged GETs, written at their place in a sparse local
    file of the segment's name; returns its path (the caller removes the scratch when done)."""
    segment = snapshot.segments[segment_index]
    path = snapshot.segment_path(segment)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for first in range(start, end, CHUNK_BYTES):
            last = min(end, first + CHUNK_BYTES) - 1
            os.pwrite(fd, store.get(segment.file, first, last, size_max=last - first + 1), first)
    finally:
        os.close(fd)
    return path



def clean_downloaded(store: StoreSnapshot, clean, **options) -> dict:
    """Any engine on a local copy: the snapshot downloaded, ``clean(path, **options)`` (the
    single-process baseline), its ``cleaned/`` files uploaded, then ``result.json``, last. A dry
    run (``dry_run=True``, handed to ``clean``) only reads the store: the document says what
    cleaning would reclaim, and nothing is written or deleted there."""
    scratch = tempfile.mkdtemp(prefix="seglog-clean-")
    try:
        if options.get("dry_run"):
            return clean(download_snapshot(store, scratch), **options)
        store.delete_under(RESULT_FILE)
        store.delete_under(CLEANED_DIR + "/")
        path = download_snapshot(store, scratch)
        document = clean(path, **options)
        for output in document["output_segments"]:
            stem = output["file"][: -len(".log")]
            for suffix in (".log", ".index", ".timeindex"):
                store.put_file(f"{CLEANED_DIR}/{stem}{suffix}", os.path.join(path, CLEANED_DIR, stem + suffix))
        with open(os.path.join(path, RESULT_FILE), "rb") as f:
            store.put(RESULT_FILE, f.read())
        return document
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
