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
    ],
    ids=["Producer", "Consumer", "Admin"],
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
