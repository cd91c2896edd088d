import seglog_server.storage as storage
from seglog_server.storage.base import errors


def test_storage_all_is_sorted_and_every_name_resolves():
    assert storage.__all__ == sorted(storage.__all__, key=lambda name: (not name.isupper(), name))
    for name in storage.__all__:
        assert getattr(storage, name) is not None


def test_errors_all_is_sorted_and_lists_every_storage_error():
    assert errors.__all__ == sorted(errors.__all__)
    declared = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.StorageError)
    }
    assert declared == set(errors.__all__)
