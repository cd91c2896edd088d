"""``seglog cleaner run --snapshot-store``: a snapshot is cleaned only when the service exported
it inside the given store location, at a key-path boundary (an oracle over random names), and
the job's own URL parsing gives back the same bucket, prefix and snapshot id."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog_cli.cleaner import under_store
from seglog_spark.object_io import StoreSnapshot

_NAME = st.text(alphabet="abcdefghij0123-", min_size=1, max_size=6).filter(lambda s: not s.startswith("-"))
_PATH = st.lists(_NAME, min_size=0, max_size=3).map("/".join)


def _url(bucket: str, root: str, snapshot_id: str) -> str:
    return f"s3://{bucket}/{root + '/' if root else ''}cleaning-snapshots/{snapshot_id}/"


@given(_NAME, _PATH, _NAME, _PATH, _NAME, st.booleans())
def test_a_snapshot_url_is_accepted_exactly_when_it_lies_in_the_store(bucket, root, other_bucket, other_root,
                                                                        snapshot_id, slash):
    store = f"s3://{bucket}/{root}" if root else f"s3://{bucket}"
    store += "/" if slash else ""
    url = _url(other_bucket, other_root, snapshot_id)
    key = f"{other_root}/cleaning-snapshots" if other_root else "cleaning-snapshots"
    expected = other_bucket == bucket and (not root or key == root or key.startswith(root + "/"))
    assert under_store(url, store) == expected


def test_a_prefix_is_not_a_prefix_of_a_longer_name():
    assert not under_store("s3://b/prefix/cleaning-snapshots/x/", "s3://b/pre")
    assert under_store("s3://b/pre/cleaning-snapshots/x/", "s3://b/pre/")


@given(_NAME, _PATH, _NAME)
def test_the_job_parses_back_what_the_service_answered(bucket, root, snapshot_id):
    parsed = StoreSnapshot.parse(_url(bucket, root, snapshot_id), "http://127.0.0.1:1")
    assert (parsed.bucket, parsed.snapshot_id, parsed.endpoint_url) == (bucket, snapshot_id, "http://127.0.0.1:1")
    assert parsed.url == _url(bucket, root, snapshot_id)


def test_a_url_without_a_snapshot_key_is_refused():
    import pytest

    from seglog_spark.object_io import StoreError

    for bad in ("s3://bucket", "s3://bucket/", "http://bucket/x/", "s3:///x/"):
        with pytest.raises(StoreError, match="expected a snapshot URL"):
            StoreSnapshot.parse(bad)
