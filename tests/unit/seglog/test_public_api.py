"""The declared public surface: seglog.__all__ sorted, complete, importable, and lazy."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import seglog
import seglog.admin
import seglog.consumer
import seglog.errors
import seglog.producer
import seglog.structs
from seglog.records import Compression


def test_all_is_sorted_and_without_duplicates():
    assert seglog.__all__ == sorted(set(seglog.__all__))


def test_every_name_in_all_resolves():
    for name in seglog.__all__:
        assert getattr(seglog, name) is not None, name


def test_every_public_name_of_the_client_modules_is_exported():
    modules = [seglog.admin, seglog.consumer, seglog.errors, seglog.producer, seglog.structs]
    internal_helpers = {"error_from_codec", "error_from_rpc", "error_from_partition", "error_from_status",
                        "raise_partition_errors", "translate_codec_errors", "translate_rpc_errors",
                        "normalize_headers", "Header", "HeadersLike"}
    for module in modules:
        for name in module.__all__:
            if name not in internal_helpers:
                assert name in seglog.__all__, f"{module.__name__}.{name}"


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError):
        seglog.NoSuchThing  # noqa: B018


def test_importing_the_codec_does_not_import_grpc():
    code = "import sys, seglog.records; print('grpc' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("sync_cls", "async_cls"),
    [
        (seglog.Producer, seglog.AsyncProducer),
        (seglog.Consumer, seglog.AsyncConsumer),
        (seglog.Admin, seglog.AsyncAdmin),
        (seglog.GroupConsumer, seglog.AsyncGroupConsumer),
    ],
    ids=["Producer", "Consumer", "Admin", "GroupConsumer"],
)
def test_sync_facade_has_the_async_signature_for_every_public_method(sync_cls, async_cls):
    public = {n for n in dir(async_cls) if not n.startswith("_") and n not in ("start",)}
    for name in sorted(public | {"__init__"}):
        assert hasattr(sync_cls, name), f"{sync_cls.__name__} lacks {name}"
        sync_params = inspect.signature(getattr(sync_cls, name)).parameters
        async_params = inspect.signature(getattr(async_cls, name)).parameters
        assert list(sync_params) == list(async_params), name
        for param in sync_params:
            assert sync_params[param].default == async_params[param].default, (name, param)
            assert sync_params[param].kind == async_params[param].kind, (name, param)


# The constructors' keywords, kinds and defaults as released: the facades and the shared
# connection options may be rebuilt underneath, these stay.
_CONNECTION = [("request_timeout_ms", 30000), ("credentials", None), ("channel_options", ()), ("tls", None),
               ("tls_ca", None), ("tls_cert", None), ("tls_key", None), ("token", None)]
RELEASED_CONSTRUCTORS = {
    "Admin": [("server", "127.0.0.1:50551"), *_CONNECTION],
    "Consumer": [("server", "127.0.0.1:50551"), ("topic", ""), ("partition", None), ("start", "latest"),
                 ("mode", "fetch"), ("fetch_max_bytes", 1048576), ("fetch_max_wait_ms", 500), ("fetch_min_bytes", 1),
                 ("max_poll_records", 500), ("check_crcs", True), ("auto_offset_reset", None),
                 ("consumer_timeout_ms", None), *_CONNECTION,
                 # A group member (KafkaConsumer.subscribe), added after the release, keyword-only at the end.
                 ("group_id", None), ("topics", None), ("enable_auto_commit", None), ("auto_commit_interval_ms", 5000),
                 ("on_assign", None), ("on_revoke", None), ("group_instance_id", None), ("client_id", None)],
    "Producer": [("server", "127.0.0.1:50551"), ("acks", seglog.Acks.WRITTEN), ("compression", Compression.NONE),
                 ("batch_size", 16384), ("linger_ms", 5), ("buffer_bytes", 33554432), ("max_request_bytes", 1048576),
                 ("max_in_flight_requests", 5), ("max_in_flight_per_partition", 5), ("max_block_ms", 60000),
                 ("retries", 5), ("retry_backoff_ms", 100), *_CONNECTION, ("enable_idempotence", True)],
}
POSITIONAL = {"Admin": 1, "Consumer": 3, "Producer": 1}  # the rest are keyword-only
TWINS = [(seglog.Producer, seglog.AsyncProducer), (seglog.Consumer, seglog.AsyncConsumer),
         (seglog.Admin, seglog.AsyncAdmin)]


@pytest.mark.parametrize(("sync_cls", "async_cls"), TWINS, ids=["Producer", "Consumer", "Admin"])
def test_each_sync_constructor_signature_equals_its_async_twins(sync_cls, async_cls):
    assert inspect.signature(sync_cls) == inspect.signature(async_cls)
    assert inspect.signature(sync_cls.__init__) == inspect.signature(async_cls.__init__)


@pytest.mark.parametrize(("sync_cls", "async_cls"), TWINS, ids=["Producer", "Consumer", "Admin"])
def test_constructor_keywords_and_defaults_are_the_released_ones(sync_cls, async_cls):
    released = RELEASED_CONSTRUCTORS[sync_cls.__name__]
    for cls in (sync_cls, async_cls):
        parameters = inspect.signature(cls).parameters.values()
        assert [(p.name, p.default) for p in parameters] == released, cls.__name__
        kinds = [p.kind for p in parameters]
        positional = POSITIONAL[sync_cls.__name__]
        assert set(kinds[:positional]) == {inspect.Parameter.POSITIONAL_OR_KEYWORD}, cls.__name__
        assert set(kinds[positional:]) == {inspect.Parameter.KEYWORD_ONLY}, cls.__name__


def test_every_client_takes_the_connection_options_with_their_defaults():
    from seglog._connection import ConnectionOptions

    connection = list(inspect.signature(ConnectionOptions.resolve).parameters.values())
    for cls in (seglog.AsyncProducer, seglog.AsyncConsumer, seglog.AsyncAdmin):
        parameters = inspect.signature(cls).parameters
        for option in connection:
            assert option.name in parameters, (cls.__name__, option.name)
            assert parameters[option.name].default == option.default, (cls.__name__, option.name)


@pytest.mark.parametrize("sync_cls", [seglog.Producer, seglog.Admin, seglog.Consumer])
def test_a_sync_client_refuses_bad_connection_options_in_the_callers_thread(sync_cls):
    from seglog import _sync

    arguments = {"topic": "t"} if sync_cls is seglog.Consumer else {}
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        sync_cls(tls_key=b"-----BEGIN PRIVATE KEY-----", **arguments)
    assert _sync._shared is None  # no loop thread was started for it


def test_the_consumers_offset_reset_default_is_the_released_one_without_a_group_and_kafkas_with_one():
    # auto_offset_reset's default became None when groups came: "none" (as released) without a
    # group, Kafka's "latest" for a group member.
    assert seglog.AsyncConsumer("127.0.0.1:1", "t")._config.auto_offset_reset == "none"
    assert seglog.AsyncConsumer("127.0.0.1:1", group_id="g", topics=["t"])._group._reset == "latest"
