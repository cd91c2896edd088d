"""Cleaning snapshots in the object store: for a cleaner that cannot see the service's disk.

A snapshot is still taken on the service's disk (hard links and ``manifest.json``,
``log_snapshot.py``); exporting it copies that directory, object by object, under one key prefix
of the service's own store (``--remote-storage``), and the commit copies the job's output back
into the same directory before ``install_cleaned`` checks and installs it exactly as it does a
shared-disk result. So the store is only a transport: every check stays where it was.

Object layout under the store's prefix (CLEANING-CONTRACT.md, "The snapshot in an object store")::

    cleaning-snapshots/<snapshot id>/00000000000000000000.log   the segments, as linked
    cleaning-snapshots/<snapshot id>/manifest.json              written last by the export
    cleaning-snapshots/<snapshot id>/cleaned/<base>.log|.index|.timeindex   by the job
    cleaning-snapshots/<snapshot id>/result.json                written last by the job

Every export PUT is create-only (an id is never reused, so an existing object is someone else's).
The service writes only to the store it was configured with: a request cannot point it at another
bucket or endpoint with its credentials. Compacted topics are never tiered (Kafka refuses it, and
so does seglog), so a snapshot's segments are always local files and are always copied.

A local file ``store.json`` in the snapshot directory records the export, so a restarted service
still commits from (and removes) the objects.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from ..base import file_names
from ..base.errors import InvalidCleaningResultError, RemoteResourceNotFoundError
from ..base.fs import FileSystem
from ..dirs.log_dir import remove_tree
from .cleaning_manifest import RESULT_BYTES_MAX, CleaningResult, SnapshotManifest, parse_result
from .log_snapshot import CLEANED_DIR_NAME, MANIFEST_FILE_NAME, RESULT_FILE_NAME, TakenSnapshot

if TYPE_CHECKING:  # boto3 is imported only by a service with a store (app.py)
    from ..remote.object_store import ObjectStore

__all__ = ["EXPORT_FILE_NAME", "SNAPSHOTS_KEY_PREFIX", "SnapshotStore"]

SNAPSHOTS_KEY_PREFIX = "cleaning-snapshots/"
EXPORT_FILE_NAME = "store.json"
# Downloads of cleaned segments go by ranged GETs this large: a 1 GiB segment never sits in
# memory whole, and one GET's fixed cost (a round trip, ~1 ms on loopback) is noise beside 8 MiB.
_GET_CHUNK_BYTES = 8 * 1024 * 1024
# An index is at most segment.index.bytes, whose upper limit the topic configs accept is 2 GiB;
# the manifest's value bounds each download.
_INDEX_BYTES_DEFAULT = 10 * 1024 * 1024


class SnapshotStore:
    """Export a taken snapshot, fetch its cleaning result, remove its objects."""

    def __init__(self, store: ObjectStore, fs: FileSystem) -> None:
        self.store = store
        self._fs = fs

    # -- naming --------------------------------------------------------------------------------
    @staticmethod
    def key_prefix(snapshot_id: str) -> str:
        return f"{SNAPSHOTS_KEY_PREFIX}{snapshot_id}/"

    def url(self, snapshot_id: str) -> str:
        """``s3://BUCKET/<store prefix>/cleaning-snapshots/<id>/``: what a cleaner is given."""
        return f"s3://{self.store.config.bucket}/{self.store.full_key(self.key_prefix(snapshot_id))}"

    def is_exported(self, snapshot_dir: str) -> bool:
        return self._fs.exists(os.path.join(snapshot_dir, EXPORT_FILE_NAME))

    # -- export (CreateSnapshot) -----------------------------------------------------------------
    def export(self, taken: TakenSnapshot) -> str:
        """Copies the snapshot's segments, then its manifest, to the store; returns its URL.
        Raises RemoteStorageError (RemoteStorageUnavailableError when the store is down); the
        caller then has the objects already written removed (an export without ``manifest.json``
        is incomplete and never read anyway)."""
        manifest = taken.manifest
        prefix = self.key_prefix(manifest.snapshot_id)
        for segment in manifest.segments:
            with open(os.path.join(taken.path, segment.file), "rb") as body:
                self.store.put(prefix + segment.file, body, segment.size_bytes, create_only=True)
        data = manifest.to_json_bytes()
        self.store.put(prefix + MANIFEST_FILE_NAME, data, len(data), create_only=True)
        url = self.url(manifest.snapshot_id)
        record = json.dumps({"key_prefix": prefix, "url": url}, sort_keys=True).encode()
        self._fs.write_atomically(os.path.join(taken.path, EXPORT_FILE_NAME), record)
        return url

    # -- commit (CommitCleaned) ------------------------------------------------------------------
    def fetch_result(self, snapshot_dir: str, manifest: SnapshotManifest) -> CleaningResult:
        """Replaces the snapshot directory's ``cleaned/`` and ``result.json`` with the job's
        objects: ``cleaned/`` first, each file checked against the size ``result.json`` names,
        then ``result.json`` last (its presence means the output is complete, as on a shared
        disk). Raises InvalidCleaningResultError (no result, a file of the wrong size or
        missing) or RemoteStorageError; either way nothing is installed and what was fetched is
        removed, so the commit may be retried."""
        prefix = self.key_prefix(manifest.snapshot_id)
        result_location = self.url(manifest.snapshot_id) + RESULT_FILE_NAME
        cleaned_dir = os.path.join(snapshot_dir, CLEANED_DIR_NAME)
        result_path = os.path.join(snapshot_dir, RESULT_FILE_NAME)
        self._discard_local_output(cleaned_dir, result_path)
        try:
            data = self.store.get(prefix + RESULT_FILE_NAME, RESULT_BYTES_MAX)
        except RemoteResourceNotFoundError:
            raise InvalidCleaningResultError(
                f"snapshot {manifest.snapshot_id} has no {result_location}: the cleaning job has not finished"
            ) from None
        result = parse_result(data, result_location, manifest)
        try:
            self._fs.makedirs(cleaned_dir)
            for name, size_max, exact in _output_files(result, manifest):
                self._download(prefix + f"{CLEANED_DIR_NAME}/{name}", os.path.join(cleaned_dir, name), size_max, exact)
            self._fs.write_atomically(result_path, data)
        except BaseException:
            self._discard_local_output(cleaned_dir, result_path)
            raise
        return result

    def _download(self, key: str, path: str, size_max: int, exact: bool) -> None:
        try:
            size = self.store.size_of(key)
        except RemoteResourceNotFoundError:
            raise InvalidCleaningResultError(
                f"output object {self.store.full_key(key)!r} named in {RESULT_FILE_NAME} is missing") from None
        if size > size_max or (exact and size != size_max):
            raise InvalidCleaningResultError(
                f"output object {self.store.full_key(key)!r} is {size} bytes; {RESULT_FILE_NAME} "
                f"{'says' if exact else 'allows at most'} {size_max}")
        fd = self._fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            position = 0
            while position < size:
                last = min(size, position + _GET_CHUNK_BYTES) - 1
                chunk = self.store.get(key, last - position + 1, position, last)
                self._fs.pwrite(fd, chunk, position)
                position += len(chunk)
            self._fs.fsync(fd)
        finally:
            self._fs.close(fd)

    def _discard_local_output(self, cleaned_dir: str, result_path: str) -> None:
        if self._fs.exists(cleaned_dir):
            remove_tree(cleaned_dir, self._fs)
        try:
            self._fs.unlink(result_path)
        except FileNotFoundError:
            pass

    # -- removal -------------------------------------------------------------------------------
    def remove(self, snapshot_id: str) -> int:
        """Deletes every object of the snapshot (raises RemoteStorageError); returns the count.
        Called off every lock, through snapshot_removals.py, which retries it until it succeeds."""
        keys = list(self.store.list(self.key_prefix(snapshot_id)))
        if keys:
            self.store.delete(keys)
        return len(keys)


def _output_files(result: CleaningResult, manifest: SnapshotManifest) -> list[tuple[str, int, bool]]:
    """The files the install reads, each with its largest acceptable size: a ``.log`` exactly as
    ``result.json`` says (install_cleaned checks it and its CRC), an index within the topic's
    segment.index.bytes."""
    index_max = int(manifest.configs.get("segment.index.bytes", _INDEX_BYTES_DEFAULT))
    files: list[tuple[str, int, bool]] = []
    for output in result.output_segments:
        files.append((output.file, output.size_bytes, True))
        stem = file_names.filename_prefix(output.base_offset)
        if output.index_crc32c is not None:
            files.append((stem + file_names.INDEX_SUFFIX, index_max, False))
        if output.timeindex_crc32c is not None:
            files.append((stem + file_names.TIME_INDEX_SUFFIX, index_max, False))
    return files
