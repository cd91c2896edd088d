"""What seglog's etcd writers write decodes as written (cluster/records.py), over the range of
inputs their callers accept, against a real etcd: a topic record as CreateTopic writes it (configs
as a client sends them, padded or in any case LogConfig accepts), its owner records, an offset
ceiling and the producer-id counter. A decoder capping a field below what its writer writes refuses
a good record: every instance then counts the topic malformed and never serves it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, assume, given, settings
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

# A valid text of each config: its default as LogConfig writes it, and the same padded or cased as
# the parsers accept (they strip and lower-case).
_DEFAULTS = LogConfig().to_properties()
SPACES = st.text(alphabet=" \t", max_size=6000)


def _config_texts():
    return st.dictionaries(st.sampled_from(sorted(_DEFAULTS)), st.tuples(SPACES, SPACES, st.booleans()),
                           max_size=8).map(lambda chosen: {
                               name: before + (_DEFAULTS[name].upper() if upper and _DEFAULTS[name] in ("true", "false")
                                               else _DEFAULTS[name]) + after
                               for name, (before, after, upper) in chosen.items()})


@pytest.fixture(scope="module")
def gateway(etcd):
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    yield gateway
    gateway.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs=_config_texts(), partitions=st.integers(min_value=1, max_value=40),
       name=st.from_regex(r"[a-zA-Z0-9._-]{1,200}", fullmatch=True))
def test_a_topic_record_create_writes_decodes_with_its_configs_canonical(gateway, configs, partitions, name):
    try:
        wanted = LogConfig.from_properties(configs)
    except InvalidConfigError:
        assume(False)  # CreateTopic refuses it before anything is written
    topic = f"{name}-{next(_names)}"
    owners = [f"i{partition % 3}" for partition in range(partitions)]
    create_topic(gateway, KEYS, topic, owners, configs)
    kv = gateway.get(KEYS.topic(topic))
    record = decode_topic(kv.key, kv.value)
    assert record.partitions == partitions
    assert record.configs == {name: wanted.to_properties()[name] for name in configs}
    assert LogConfig.from_properties(record.configs) == wanted
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
