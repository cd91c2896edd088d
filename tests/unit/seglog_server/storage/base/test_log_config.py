import pytest

from seglog.records import TimestampType
from seglog_server.storage.base.errors import InvalidConfigError
from seglog_server.storage.base.log_config import LONG_MAX, LogConfig


def test_defaults_are_kafkas():
    config = LogConfig()
    assert config.segment_bytes == 1_073_741_824
    assert config.segment_ms == 604_800_000
    assert config.segment_index_bytes == 10_485_760
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 604_800_000
    assert config.retention_bytes == -1
    assert config.cleanup_policy == frozenset({"delete"})
    assert config.max_message_bytes == 1_048_588
    assert config.message_timestamp_type is TimestampType.CREATE_TIME
    assert config.flush_messages == LONG_MAX
    assert config.file_delete_delay_ms == 60_000


def test_from_properties_parses_every_kind_over_defaults():
    defaults = LogConfig(retention_ms=1000)
    config = LogConfig.from_properties(
        {
            "segment.bytes": "4096",
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.25",
            "message.timestamp.type": "LogAppendTime",
            "preallocate": "TRUE",
        },
        defaults,
    )
    assert config.segment_bytes == 4096
    assert config.retention_ms == 1000  # kept from the given defaults
    assert config.cleanup_policy == frozenset({"compact", "delete"})
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    assert config.preallocate is True


def test_to_properties_round_trips_every_known_name():
    config = LogConfig(cleanup_policy=frozenset({"compact"}), segment_bytes=2048)
    props = config.to_properties()
    assert sorted(props) == LogConfig.known_names()
    assert LogConfig.from_properties(props) == config


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("segment.byte", "1", "unknown topic config 'segment.byte'"),
        ("segment.bytes", "big", "segment.bytes must be an integer, found 'big'"),
        ("segment.bytes", "13", "segment.bytes must be at least 14"),
        ("segment.bytes", str(2**31), "segment.bytes must be at most"),
        ("retention.ms", "-2", "retention.ms must be at least -1"),
        ("cleanup.policy", "compact,shred", "cleanup.policy must be a list of delete and/or compact"),
        ("cleanup.policy", "", "cleanup.policy must be a list"),
        ("min.cleanable.dirty.ratio", "1.5", "must be at most 1.0"),
        ("min.cleanable.dirty.ratio", "nan", "must be a number"),
        ("message.timestamp.type", "createtime", "must be CreateTime or LogAppendTime"),
        ("preallocate", "yes", "preallocate must be true or false"),
        ("flush.messages", "0", "flush.messages must be at least 1"),
    ],
)
def test_from_properties_refuses_bad_input_naming_key_and_value(name, value, fragment):
    with pytest.raises(InvalidConfigError, match=None) as info:
        LogConfig.from_properties({name: value})
    assert fragment in str(info.value)


def test_min_compaction_lag_above_max_is_refused():
    with pytest.raises(InvalidConfigError, match="min.compaction.lag.ms"):
        LogConfig.from_properties({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_roll_ms_is_capped_by_max_compaction_lag_on_compacted_topics():
    assert LogConfig(segment_ms=1000, max_compaction_lag_ms=10).roll_ms == 1000
    compacted = LogConfig(segment_ms=1000, max_compaction_lag_ms=10, cleanup_policy=frozenset({"compact"}))
    assert compacted.roll_ms == 10
    assert compacted.is_compacted and not compacted.is_delete
