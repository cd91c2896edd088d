"""ObjectStore against a real S3-compatible server: reads, writes, sizes and every error class."""

from __future__ import annotations

import pytest
from tests.integration.remote.conftest import BUCKET, store_config
from tests.support.s3_server import CREDENTIALS_ENV, free_port

from seglog_server.storage.base.errors import (
    CorruptRemoteObjectError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageUnavailableError,
)
from seglog_server.storage.remote import ObjectStore, ObjectStoreConfig

pytestmark = pytest.mark.timeout(60)

# Tight deadlines: a dead or silent store must fail these calls quickly.
FAST = {"connect_timeout_s": 0.5, "read_timeout_s": 1.0, "attempts_max": 2}


@pytest.fixture(scope="module")
def weed(private_weed):
    """A weed of this module's own (conftest's private_weed), not the session's:
    its tests freeze the store and check which keys it refuses."""
    return private_weed


def test_put_then_get_whole_and_ranged(store):
    store.put("a/x", b"0123456789", 10, create_only=True)
    assert store.get("a/x", 10) == b"0123456789"
    assert store.get("a/x", 4, 3, 6) == b"3456"
    assert store.size_of("a/x") == 10
    assert list(store.list("a/")) == ["a/x"]


def test_create_only_put_never_overwrites(store):
    store.put("a/x", b"first", 5, create_only=True)
    with pytest.raises(RemoteStorageError, match="already exists"):
        store.put("a/x", b"second", 6, create_only=True)
    assert store.get("a/x", 10) == b"first"


def test_get_of_a_missing_key_is_not_found(store):
    with pytest.raises(RemoteResourceNotFoundError, match="not found: GET"):
        store.get("nothing/here", 10)


def test_object_above_the_read_limit_is_refused_before_reading(store):
    store.put("big", b"x" * 1000, 1000, create_only=True)
    with pytest.raises(CorruptRemoteObjectError, match="holds 1000 bytes, above the 999-byte limit"):
        store.get("big", 999)


def test_range_above_the_read_limit_is_refused_without_a_request(store):
    with pytest.raises(CorruptRemoteObjectError, match="above the 10-byte limit"):
        store.get("never-asked", 10, 0, 10)


def test_range_past_the_end_is_a_short_object_error(store):
    store.put("short", b"abc", 3, create_only=True)
    with pytest.raises(CorruptRemoteObjectError, match="expected 10"):
        store.get("short", 10, 0, 9)


def test_delete_removes_present_keys_and_ignores_absent_ones(store):
    for key in ("d/1", "d/2"):
        store.put(key, b"v", 1, create_only=True)
    store.delete(["d/1", "d/2", "d/absent"])
    assert list(store.list("d/")) == []


def test_put_above_the_single_put_limit_is_refused(weed, prefix):
    store = ObjectStore(store_config(weed.endpoint, prefix, put_bytes_max=4))
    with pytest.raises(RemoteStorageError, match="above the single-PUT limit of 4 bytes"):
        store.put("k", b"12345", 5, create_only=True)


def test_missing_bucket_is_not_found(weed):
    store = ObjectStore(ObjectStoreConfig(bucket="no-such-bucket-here", endpoint_url=weed.endpoint))
    with pytest.raises(RemoteResourceNotFoundError):
        store.get("k", 10)


def test_no_credentials_names_the_environment_variables(weed, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    store = ObjectStore(store_config(weed.endpoint, "p", **FAST))
    with pytest.raises(RemoteStorageError, match="AWS_ACCESS_KEY_ID") as caught:
        store.get("k", 10)
    assert not isinstance(caught.value, RemoteStorageUnavailableError)


def test_credentials_from_a_credentials_file(weed, monkeypatch, tmp_path, prefix):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[default]\naws_access_key_id = {CREDENTIALS_ENV['AWS_ACCESS_KEY_ID']}\n"
                           f"aws_secret_access_key = {CREDENTIALS_ENV['AWS_SECRET_ACCESS_KEY']}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    store = ObjectStore(store_config(weed.endpoint, prefix))
    store.put("k", b"v", 1, create_only=True)
    assert store.get("k", 1) == b"v"


def test_unknown_access_key_is_refused_not_retriable(weed, monkeypatch, prefix):
    # weed mini adopts the key pair in its environment at start (the fixture's): others are refused.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "somebody-else")
    store = ObjectStore(store_config(weed.endpoint, prefix))
    with pytest.raises(RemoteStorageError, match="InvalidAccessKeyId") as caught:
        store.put("k", b"v", 1, create_only=True)
    assert not isinstance(caught.value, RemoteStorageUnavailableError)


# -- the store failing -------------------------------------------------------------------------
def test_store_answering_503_is_unavailable_naming_the_endpoint(proxy, prefix):
    proxy.mode = "503"
    store = ObjectStore(store_config(proxy.endpoint, prefix, **FAST))
    with pytest.raises(RemoteStorageUnavailableError, match=f"unavailable.*{proxy.endpoint}"):
        store.get("k", 10)
    with pytest.raises(RemoteStorageUnavailableError, match="SlowDown"):
        store.put("k", b"v", 1, create_only=True)


@pytest.mark.timeout(15)
def test_silent_store_fails_within_its_deadline(proxy, prefix):
    proxy.mode = "stall"
    store = ObjectStore(store_config(proxy.endpoint, prefix, **FAST))
    with pytest.raises(RemoteStorageUnavailableError, match=f"{proxy.endpoint}.*ReadTimeout"):
        store.get("k", 10)


@pytest.mark.timeout(15)
def test_stopped_store_is_unavailable_naming_the_endpoint(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens: a store that is down
    store = ObjectStore(ObjectStoreConfig(bucket=BUCKET, endpoint_url=endpoint, **FAST))
    with pytest.raises(RemoteStorageUnavailableError, match=f"unavailable: GET .* at {endpoint}"):
        store.get("k", 10)


@pytest.mark.timeout(20)
def test_paused_store_fails_within_its_deadline_and_serves_after_resume(weed, store, prefix):
    store.put("k", b"v", 1, create_only=True)
    fast = ObjectStore(store_config(weed.endpoint, prefix, **FAST))
    weed.pause()
    try:
        with pytest.raises(RemoteStorageUnavailableError, match=weed.endpoint):
            fast.get("k", 10)
    finally:
        weed.resume()
    assert store.get("k", 10) == b"v"
