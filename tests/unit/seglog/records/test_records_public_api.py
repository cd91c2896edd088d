"""The declared public surface of seglog.records."""

import inspect

import seglog.records


def test_all_is_sorted():
    assert seglog.records.__all__ == sorted(seglog.records.__all__)


def test_all_names_exist():
    missing = [name for name in seglog.records.__all__ if not hasattr(seglog.records, name)]
    assert missing == []


def test_all_is_complete():
    # Every public class, function and upper-case constant the package namespace holds
    # (submodules aside) is in __all__.
    public = {
        name
        for name, value in vars(seglog.records).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == set(seglog.records.__all__)


def test_contract_names_are_exported():
    contract = {
        "MAGIC", "LOG_OVERHEAD", "RECORD_BATCH_OVERHEAD", "NO_TIMESTAMP", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH",
        "NO_SEQUENCE", "NO_PARTITION_LEADER_EPOCH", "HEADER", "BASE_OFFSET_OFFSET", "LENGTH_OFFSET",
        "PARTITION_LEADER_EPOCH_OFFSET", "MAGIC_OFFSET", "CRC_OFFSET", "ATTRIBUTES_OFFSET", "LAST_OFFSET_DELTA_OFFSET",
        "BASE_TIMESTAMP_OFFSET", "MAX_TIMESTAMP_OFFSET", "PRODUCER_ID_OFFSET", "PRODUCER_EPOCH_OFFSET",
        "BASE_SEQUENCE_OFFSET", "RECORDS_COUNT_OFFSET", "RECORDS_OFFSET", "Compression", "TimestampType", "crc32c",
        "Record", "RecordBatch", "iter_batches", "RecordBatchBuilder", "set_max_timestamp",
        "set_partition_leader_epoch", "CodecError", "CorruptRecordError", "InvalidCrcError",
        "UnsupportedCompressionError",
    }  # fmt: skip
    assert contract <= set(seglog.records.__all__)


def test_error_tree():
    from seglog.records import errors

    assert issubclass(errors.CorruptRecordError, errors.CodecError)
    assert issubclass(errors.InvalidCrcError, errors.CorruptRecordError)
    assert issubclass(errors.UnsupportedCompressionError, errors.CodecError)
    assert not issubclass(errors.UnsupportedCompressionError, errors.CorruptRecordError)
    assert errors.__all__ == sorted(errors.__all__)

