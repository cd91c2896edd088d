"""What seglog's etcd writers write decodes as written (cluster/records.py), over the range of
inputs their callers accept, against a real etcd: a topic record as CreateTopic writes it (configs
as a client sends them, padded or in any case LogConfig accepts, checked against each other and the
instance's topic defaults as the instance checks them), its owner records, an offset
ceiling and the producer-id counter. A decoder capping a field below what its writer writes refuses
a good record: every instance then counts the topic malformed and never serves it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from seglog_server.cluster import ClusterKeys, EtcdGateway
from seglog_server.cluster.offset_ceilings import raise_ceiling, read_ceiling
from seglog_server.cluster.ownership import PartitionOwner, create_topic, read_owner
from seglog_server.cluster.producer_id_blocks import reserve_producer_id_block
from seglog_server.cluster.records import EPOCH_MAX, decode_topic
from seglog_server.storage import LogConfig
from seglog_server.storage.base.errors import InvalidConfigError

KEYS = ClusterKeys("writers")
_names = itertools.count()

# A valid text of each config: its default as LogConfig writes it, or one of a few values of the
# configs LogConfig checks against each other (local retention within retention, the compaction
# lags, tiering not compacted), and the same padded or cased as the parsers accept (they strip and
# lower-case).
_DEFAULTS = LogConfig().to_properties()
_CHECKED_TOGETHER = {
    "retention.ms": ["-1", "1000", "864000000"],
    "local.retention.ms": ["-2", "-1", "1000", "864000000"],
    "retention.bytes": ["-1", "1024"],
    "local.retention.bytes": ["-2", "-1", "1024", "1073741824"],
    "min.compaction.lag.ms": ["0", "1000", "604800000"],
    "max.compaction.lag.ms": ["1000", "604800000", "9223372036854775807"],
    "cleanup.policy": ["delete", "compact", "compact,delete"],
    "remote.storage.enable": ["false", "true"],
}
SPACES = st.text(alphabet=" \t", max_size=6000)


def _value(name: str):
    return st.sampled_from(_CHECKED_TOGETHER.get(name, [_DEFAULTS[name]]))


def _config_texts(padding=SPACES, names=sorted(_DEFAULTS)):
    """Up to 4 of the configs checked together and up to 4 of ``names``."""
    def entries(chosen_from):
        entry = st.sampled_from(chosen_from).flatmap(
            lambda name: st.tuples(st.just(name), _value(name), padding, padding, st.booleans()))
        return st.lists(entry, max_size=4, unique_by=lambda chosen: chosen[0])

    return st.tuples(entries(sorted(_CHECKED_TOGETHER)), entries(names)).map(lambda two: {
        name: before + (text.upper() if upper and text in ("true", "false") else text) + after
        for name, text, before, after, upper in two[0] + two[1]})


def _topic_defaults():
    """An instance's ``--topic-default`` values: always a whole-log retention (unlimited half the
    time), against which the local one is checked, and some of the others checked together."""
    retentions = st.fixed_dictionaries({"retention.ms": _value("retention.ms"),
                                        "retention.bytes": _value("retention.bytes")})
    return st.tuples(retentions, _config_texts(padding=st.just(""), names=sorted(_CHECKED_TOGETHER))).map(
        lambda two: {**two[1], **two[0]})


@pytest.fixture(scope="module")
def gateway(etcd):
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    yield gateway
    gateway.close()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@example(configs={"local.retention.ms": " 864000000"}, topic_defaults={"retention.ms": "-1"}, partitions=1,
         name="ten-days")
@given(configs=_config_texts(), topic_defaults=_topic_defaults(),
       partitions=st.integers(min_value=1, max_value=40), name=st.from_regex(r"[a-zA-Z0-9._-]{1,200}", fullmatch=True))
def test_a_topic_record_create_writes_decodes_with_its_configs_canonical(gateway, configs, topic_defaults, partitions,
                                                                          name):
    """Checked over the instance's topic defaults (``--topic-default``), as the RPC checks them: a
    create the instance accepts (local.retention.ms=864000000 over retention.ms=-1) was once
    refused when written, its configs parsed again over Kafka's defaults."""
    try:
        defaults = LogConfig.from_properties(topic_defaults)
        wanted = LogConfig.from_properties(configs, defaults)
    except InvalidConfigError:
        assume(False)  # the instance does not start with such defaults / CreateTopic refuses it
    topic = f"{name}-{next(_names)}"
    owners = [f"i{partition % 3}" for partition in range(partitions)]
    create_topic(gateway, KEYS, topic, owners, configs, defaults=defaults)
    kv = gateway.get(KEYS.topic(topic))
    record = decode_topic(kv.key, kv.value)
    assert record.partitions == partitions
    assert record.configs == {name: wanted.to_properties()[name] for name in configs}
    assert LogConfig.from_properties(record.configs, defaults) == wanted
    assert [read_owner(gateway, KEYS, topic, partition).owner for partition in range(partitions)] == owners


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(epoch=st.integers(min_value=0, max_value=EPOCH_MAX), ceiling=st.integers(min_value=0, max_value=2**63 - 1))
def test_an_offset_ceiling_raise_writes_decodes_as_written(gateway, epoch, ceiling):
    topic = f"ceilings-{next(_names)}"
    create_topic(gateway, KEYS, topic, ["a"])
    record = read_owner(gateway, KEYS, topic, 0)
    owner = PartitionOwner("a", epoch, record.mod_revision)
    _, mod_revision = read_ceiling(gateway, KEYS, topic, 0, owner)
    assert raise_ceiling(gateway, KEYS, topic, 0, owner, ceiling, mod_revision)
    assert read_ceiling(gateway, KEYS, topic, 0, owner, block=1)[0] == max(ceiling, 1)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(now_ms=st.integers(min_value=0, max_value=(2**63 - 1) // 1000 - 2), block=st.sampled_from([1, 1000]))
def test_the_producer_id_counter_its_reservation_writes_reads_back(gateway, now_ms, block):
    gateway.delete(KEYS.producer_id_block())
    first = reserve_producer_id_block(gateway, KEYS, block, lambda: now_ms)
    assert reserve_producer_id_block(gateway, KEYS, block, lambda: 0) == first + block
