"""The checked decoding of etcd's keys and values (cluster/records.py) and the watched cache's use
of it: hostile bytes and JSON-ish values raise nothing but MalformedRecordError, and the cache
applies every event without raising, each malformed record on its safe side."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog_server.cluster import Capacity, ClusterConfig, ClusterKeys, EtcdGateway, Membership, MetadataCache
from seglog_server.cluster.errors import MalformedRecordError, OwnershipConflictError
from seglog_server.cluster.etcd_gateway import KeyValue, WatchBatch, WatchEvent, _kv, b64
from seglog_server.cluster.ownership import UNREADABLE_OWNER, owner_value, parse_owner
from seglog_server.cluster.partition_moves import COPYING, FINAL, owner_record_value, parse_move
from seglog_server.cluster.partition_moves import _value as move_value
from seglog_server.cluster.producer_id_blocks import _parse as parse_producer_id_counter
from seglog_server.cluster.records import (
    DEPTH_MAX,
    EPOCH_MAX,
    OwnerFields,
    RECORD_BYTES_MAX,
    decode_ceiling,
    decode_instance,
    decode_json,
    decode_move,
    decode_owner,
    decode_topic,
    repair_advice,
)
from seglog_server.storage.base.topic_partition import PARTITION_COUNT_MAX

KEYS = ClusterKeys("c")
TYPED_DECODERS = (decode_instance, decode_topic, decode_owner, decode_move, decode_ceiling)
DECODERS = (*TYPED_DECODERS, decode_json)

# What the audit fed the readers, each of which ended the cache's thread or answered INTERNAL.
HOSTILE_VALUES = [
    b"[1]", b'"owner"', b"null", b"", b"\xff\xfe", b'{"capacity": [], "address": "a:1"}',
    b'{"partitions": 1, "configs": [1]}', b'{"partitions": Infinity}', b'{"partitions": NaN}',
    b'{"partitions": 1e400}', b'{"epoch": 1e400, "owner": "a"}', b'{"owner": "a", "epoch": ' + b"9" * 5000 + b"}",
    b"[" * 100_000, b'{"a":' * 5000 + b"1" + b"}" * 5000, b'{"partitions": 1000000000000}',
    b'{"partitions": true}', b'{"owner": ["a"], "epoch": 0}', b'{"owner": "a", "epoch": -1}',
    b'{"source": "a", "target": "b", "epoch": 0, "state": "copying", "started_ms": 1e400}',
    b'{"epoch": 0, "ceiling": "12"}', b'{"address": "a:1", "data_dirs": "/d"}',
    b'{"address": "a:1", "capacity": {"bytes": 1.5}}', b" " * (RECORD_BYTES_MAX + 1),
]


def json_values(depth: int = 4):
    """JSON-ish values: the types json.dumps writes, big and non-finite numbers, nesting."""
    scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=10**18, max_value=10**60)
               | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["owner", "epoch", "partitions", "configs", "capacity", "address", "data_dirs", "source",
                         "target", "state", "started_ms", "ceiling", "start_offset", "acl_digest", "topic_id",
                         "partition_count", "bytes"]) | st.text(max_size=8), inner, max_size=6), max_leaves=12)


def record_values():
    """Records shaped like seglog's, with any field replaced by any JSON-ish value."""
    fields = st.dictionaries(st.sampled_from(["owner", "epoch", "partitions", "configs", "capacity", "address",
                                              "data_dirs", "source", "target", "state", "started_ms", "ceiling",
                                              "start_offset"]), json_values(), max_size=8)
    return fields.map(lambda record: json.dumps(record).encode())


def _decodes_or_refuses(decoder, value: bytes) -> None:
    try:
        decoder("c/k", value)
    except MalformedRecordError as exc:
        assert exc.key == "c/k" and "c/k" in str(exc)


@pytest.mark.parametrize("value", HOSTILE_VALUES, ids=range(len(HOSTILE_VALUES)))
@pytest.mark.parametrize("decoder", TYPED_DECODERS, ids=lambda decoder: decoder.__name__)
def test_each_hostile_value_of_the_audit_is_refused_by_name(decoder, value):
    with pytest.raises(MalformedRecordError, match="c/k"):
        decoder("c/k", value)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.sampled_from(DECODERS))
def test_any_bytes_decode_or_raise_the_cluster_error_only(value, decoder):
    _decodes_or_refuses(decoder, value)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(json_values().map(lambda v: json.dumps(v).encode()), record_values()), st.sampled_from(DECODERS))
def test_any_json_value_decodes_or_raises_the_cluster_error_only(value, decoder):
    _decodes_or_refuses(decoder, value)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=DEPTH_MAX + 1, max_value=50_000), st.sampled_from([b"[", b'{"a":']))
def test_nesting_past_the_bound_is_refused_before_json_recurses(depth, opener):
    with pytest.raises(MalformedRecordError, match="deeper"):
        decode_json("c/k", opener * depth)


def test_what_seglog_writes_decodes_as_written():
    assert decode_topic("k", b'{"configs": {"retention.ms": "5"}, "partitions": 3, "topic_id": "x"}').partitions == 3
    assert parse_owner(b'{"epoch": 4, "owner": "a", "start_offset": 9}', 7) .start_offset == 9
    assert parse_move("t", 0, b'{"epoch": 1, "source": "a", "started_ms": 5, "state": "final", "target": "b"}',
                      3).state == "final"
    assert decode_instance("k", b'{"address": "a:1", "capacity": {"bytes": 5, "partition_count": 2}, '
                                b'"data_dirs": ["/d"], "id": "a"}').bytes == 5
    assert decode_ceiling("k", b'{"ceiling": 100, "epoch": 2}').ceiling == 100
    assert decode_topic("k", b'{"partitions": %d}' % PARTITION_COUNT_MAX).partitions == PARTITION_COUNT_MAX
    with pytest.raises(MalformedRecordError, match="partitions"):
        decode_topic("k", b'{"partitions": %d}' % (PARTITION_COUNT_MAX + 1))


@pytest.mark.parametrize("key", ["c/owners/t/\u00b2", "c/moves/t/\u0663", "c/owners/t/01", "c/owners/t/",
                                 "c/owners/t/%d" % PARTITION_COUNT_MAX, "c/owners//0", "c/topics/a b",
                                 "c/topics/", "c/instances/a/b", "c/instances/", "c/topics/\\xff"])
def test_a_key_of_a_known_kind_with_bad_parts_is_refused_by_name(key):
    with pytest.raises(MalformedRecordError) as raised:
        KEYS.parse(key)
    assert raised.value.key == key


@settings(max_examples=400)
@given(st.sampled_from(["c/", "c/instances/", "c/topics/", "c/owners/", "c/moves/", "c/owners/t/", "x/"]),
       st.binary(max_size=30))
def test_any_key_parses_or_raises_the_cluster_error_only(prefix, tail):
    raw = prefix.encode() + tail
    key = _kv({"key": b64(raw)}).key  # as the gateway hands it over: never raises on bad UTF-8
    try:
        KEYS.parse(key)
    except MalformedRecordError:
        pass


def test_a_key_not_in_utf8_is_escaped_not_raised():
    assert _kv({"key": b64(b"c/topics/\xff")}).key == "c/topics/\\xff"


@pytest.mark.parametrize("value", [b"12x", b"\xd9\xa3", b"99999999999999999999", b"-1", b""])
def test_a_bad_producer_id_counter_is_the_cluster_error(value):
    with pytest.raises(MalformedRecordError, match="producer-id counter"):
        parse_producer_id_counter(value, "c/producer_id_block")


# -- the watched cache, applying events without its thread --------------------------------------
def _cache() -> MetadataCache:
    return MetadataCache(EtcdGateway(("http://127.0.0.1:9",), timeout_s=0.1), KEYS)


def _put(key: str, value: bytes, revision: int, created: int | None = None) -> WatchEvent:
    return WatchEvent("PUT", KeyValue(key, value, revision, created or revision, 0))


GOOD = {"c/instances/a": b'{"address": "a:1", "capacity": {"bytes": 0, "partition_count": 0}}',
        "c/topics/t": b'{"configs": {}, "partitions": 2}',
        "c/owners/t/0": b'{"epoch": 3, "owner": "a"}',
        "c/moves/t/0": b'{"epoch": 3, "source": "a", "started_ms": 1, "state": "copying", "target": "b"}'}


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["c/instances/a", "c/topics/t", "c/owners/t/0", "c/moves/t/0",
                                           "c/owners/t/\u00b2", "c/topics/\\xff", "c/offset_ceilings/t/0"]),
                          st.one_of(st.binary(max_size=60), json_values().map(lambda v: json.dumps(v).encode()),
                                    record_values(), st.sampled_from(HOSTILE_VALUES[:20]))), max_size=6))
def test_the_cache_applies_any_events_and_the_good_ones_after_them(events):
    cache = _cache()
    revision = 0
    for key, value in events:
        revision += 1
        cache._apply(WatchBatch([_put(key, value, revision)]))  # never raises
    for key, value in GOOD.items():
        revision += 1
        cache._apply(WatchBatch([_put(key, value, revision)]))
    assert cache.owner_of("t", 0).owner == "a" and cache.owner_of("t", 0).epoch == 3
    assert cache.topics() == {"t": 2} and cache.instances()["a"].alive
    assert cache.move_of("t", 0)["target"] == "b"


def test_each_malformed_record_is_applied_on_its_safe_side_counted_once():
    cache = _cache()
    for revision, (key, value) in enumerate(GOOD.items(), start=1):
        cache._apply(WatchBatch([_put(key, value, revision)]))
    bad = [_put("c/instances/a", b"[1]", 10), _put("c/topics/t", b'{"partitions": 1e400}', 11, created=2),
           _put("c/owners/t/0", b'{"owner": "a", "epoch": ' + b"9" * 5000 + b"}", 12),
           _put("c/moves/t/0", b"[" * 100_000, 13), _put("c/owners/t/\u00b2", b"{}", 14)]
    cache._apply(WatchBatch(bad))
    cache._apply(WatchBatch(bad[:1]))  # the same key at the same revision again: counted once
    assert not cache.instances()["a"].alive  # not registered: nothing placed or routed there
    # A later version of a topic record the view decoded: its last good one stands.
    assert cache.topics() == {"t": 2} and cache.topic_configs_at("t") == ({}, 2)
    assert cache.topic_generation("t") == 2  # the generation stays: local copies neither dropped nor made
    owner = cache.owner_of("t", 0)
    assert (owner.owner, owner.epoch, owner.readable) == (UNREADABLE_OWNER, 3, False)  # no one's, not absent
    assert UNREADABLE_OWNER not in cache.instances()
    assert cache.move_of("t", 0) is None
    assert cache.statistics().malformed_count == 5
    cache._apply(WatchBatch([_put("c/owners/t/0", GOOD["c/owners/t/0"], 15)]))
    assert cache.owner_of("t", 0).owner == "a"



# -- what the writers write, decoded back ----------------------------------------------------------
# Each writer is called as seglog calls it, over the range of inputs its own validation accepts, and
# its output is decoded by the reader: a cap in the decoder below what a writer writes refuses a good
# record (and takes its partitions down on every instance). The writers that go through etcd (topic
# creation, the ceiling, the producer-id counter) are driven against a real one in
# tests/integration/cluster/test_cluster_record_writers.py.
INSTANCE_IDS = st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True)
INT64 = st.integers(min_value=0, max_value=2**63 - 1)
EPOCHS = st.integers(min_value=0, max_value=EPOCH_MAX)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(INSTANCE_IDS, EPOCHS, INT64)
def test_an_owner_record_any_writer_writes_decodes_as_written(owner, epoch, start_offset):
    assert decode_owner("k", owner_value(owner, epoch)) == OwnerFields(owner, epoch, 0)
    fields = decode_owner("k", owner_record_value(owner, epoch, start_offset))
    assert (fields.owner, fields.epoch, fields.start_offset) == (owner, epoch, start_offset)


def test_no_writer_writes_an_epoch_its_reader_refuses():
    for write in (lambda: owner_value("a", EPOCH_MAX + 1), lambda: owner_record_value("a", EPOCH_MAX + 1, 0)):
        with pytest.raises(OwnershipConflictError, match="int32"):
            write()


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(INSTANCE_IDS, INSTANCE_IDS, EPOCHS, st.sampled_from([COPYING, FINAL]), INT64)
def test_a_move_record_its_writer_writes_decodes_as_written(source, target, epoch, state, started_ms):
    fields = decode_move("k", move_value(source, target, epoch, state, started_ms))
    assert (fields.source, fields.target, fields.epoch, fields.state, fields.started_ms) == (
        source, target, epoch, state, started_ms)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(INSTANCE_IDS, st.from_regex(r"[A-Za-z0-9.-]{1,300}:[1-9][0-9]{0,3}", fullmatch=True),
       st.lists(st.text(min_size=1, max_size=20) | st.text(min_size=4000, max_size=6000), min_size=1, max_size=3)
       | st.lists(
           st.text(min_size=1, max_size=3), min_size=1, max_size=1500),
       INT64, INT64, INT64, st.text(max_size=64))
def test_an_instance_record_membership_writes_decodes_as_written(instance_id, advertise, data_dirs, partitions,
                                                                  stored, free, digest):
    config = ClusterConfig(("http://127.0.0.1:2379",), advertise, tuple(data_dirs), instance_id)
    membership = Membership(config, None, lambda: Capacity(partitions, stored, free, digest))
    record = decode_instance("k", membership._record().encode())
    assert (record.address, record.data_dirs, record.partition_count, record.bytes, record.acl_digest) == (
        advertise, tuple(data_dirs), partitions, stored, digest)


@pytest.mark.parametrize("key, safe", [
    ("c/topics/t", "never delete it: that deletes the topic"),
    ("c/owners/t/0", "never delete it: a partition with no owner record is served by every instance"),
    ("c/offset_ceilings/t/0", "never delete it: a takeover would then start the partition below offsets"),
    ("c/producer_id_block", "never lower it or delete it"),
    ("c/instances/a", "never delete it: the instance would be seen gone while it still serves"),
    ("c/moves/t/0", "delete it (what AbortMove does"),
])
def test_the_repair_advice_never_says_delete_where_deleting_loses_data_or_fences(key, safe):
    """Deleting a topic record deletes the topic everywhere, an owner record lets every instance
    serve the partition, a ceiling lets a takeover reuse acknowledged offsets: those are only ever
    written again, with a valid value the advice spells out."""
    advice = repair_advice(key)
    assert safe in advice
    if "never" in safe:
        assert "write it again" in advice or "writes its record again" in advice
    assert "delete it" in repair_advice(key, key_malformed=True)


def test_a_malformed_topic_record_keeps_the_last_good_one_of_its_generation_only():
    cache = _cache()
    cache._apply(WatchBatch([_put("c/topics/t", b'{"configs": {"retention.ms": "5"}, "partitions": 3}', 2),
                             _put("c/owners/t/0", b'{"epoch": 0, "owner": "a"}', 2)]))
    cache._apply(WatchBatch([_put("c/topics/t", b'{"partitions": "3"}', 4, created=2)]))
    assert cache.topics() == {"t": 3} and cache.topic_configs_at("t") == ({"retention.ms": "5"}, 2)
    # A new generation whose record is malformed: nothing of the old one is carried over.
    cache._apply(WatchBatch([WatchEvent("DELETE", KeyValue("c/topics/t", b"", 5, 2, 0)),
                             _put("c/topics/t", b'{"partitions": "3"}', 6)]))
    assert "t" not in cache.topics() and cache.topic_generation("t") == 6
    # Its partitions are still walked by the owner threads (ceilings, epochs): by owner record.
    assert ("t", 0) in cache.owners()
    cache._apply(WatchBatch([_put("c/topics/t", b'{"partitions": 1}', 7, created=6)]))
    assert cache.topics() == {"t": 1}


def test_a_reload_that_fails_part_way_leaves_the_view_it_had():
    """A reload once emptied the view before refilling it: an error part way (a bug) left a
    half-built one for up to the back-off, a partition missing its owner there served by whoever
    holds a copy. Injected: a key of the wrong type in etcd's answer, after a good one."""
    cache = _cache()
    for revision, (key, value) in enumerate(GOOD.items(), start=1):
        cache._apply(WatchBatch([_put(key, value, revision)]))
    answer = [KeyValue("c/owners/t/0", b'{"epoch": 9, "owner": "b"}', 20, 3, 0),
              KeyValue(b"c/owners/t/1", b'{"epoch": 9, "owner": "b"}', 21, 21, 0)]
    cache._gateway.range_prefix = lambda prefix: (21, answer)
    with pytest.raises(TypeError):
        cache._reload()
    owner = cache.owner_of("t", 0)
    assert (owner.owner, owner.epoch) == ("a", 3)
    assert cache.topics() == {"t": 2} and cache.instances()["a"].alive and cache.move_of("t", 0) is not None
    answer[1] = KeyValue("c/owners/t/1", b'{"epoch": 9, "owner": "b"}', 21, 21, 0)
    cache._reload()
    assert cache.owner_of("t", 0).owner == "b" and cache.topics() == {} and cache.statistics().revision == 21


def test_the_malformed_records_held_count_falls_when_each_is_rewritten_or_deleted_and_a_reload_recounts():
    """malformed_count only grows (each key revision once); malformed_held_count is what etcd holds
    malformed now, as the view last read it: an alert waits on it (the total's increase never
    shows a record a new instance found at its first reload, before any scrape)."""
    cache = _cache()
    for revision, (key, value) in enumerate(GOOD.items(), start=1):
        cache._apply(WatchBatch([_put(key, value, revision)]))
    assert cache.statistics().malformed_held_count == 0
    cache._apply(WatchBatch([_put("c/owners/t/0", b"[1]", 10), _put("c/moves/t/0", b"[1]", 11),
                             _put("c/owners/t/\u00b2", b"{}", 12)]))
    assert cache.statistics().malformed_held_count == 3
    cache._apply(WatchBatch([_put("c/owners/t/0", b"null", 13)]))  # malformed again: still one key
    assert cache.statistics().malformed_held_count == 3
    cache._apply(WatchBatch([_put("c/owners/t/0", GOOD["c/owners/t/0"], 14),
                             WatchEvent("DELETE", KeyValue("c/moves/t/0", b"", 15, 4, 0))]))
    assert cache.statistics().malformed_held_count == 1  # repaired, deleted; the bad key stays
    answer = [KeyValue(key, value, 20, 1, 0) for key, value in GOOD.items()]
    answer.append(KeyValue("c/topics/u", b'{"partitions": NaN}', 20, 20, 0))
    cache._gateway.range_prefix = lambda prefix: (20, answer)
    cache._reload()  # a restart's view: only what etcd holds now counts
    assert cache.statistics().malformed_held_count == 1
    assert cache.statistics().malformed_count == 5  # the total: every bad key revision once


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["c/instances/a", "c/topics/t", "c/owners/t/0", "c/moves/t/0",
                                           "c/owners/t/\u00b2", "c/offset_ceilings/t/0"]),
                          st.one_of(st.none(), st.sampled_from(list(GOOD.values())),
                                    st.sampled_from(HOSTILE_VALUES[:20]), record_values())), max_size=8))
def test_the_malformed_records_held_are_the_keys_whose_last_value_alone_is_malformed(events):
    """Oracle: a key's last event, applied alone to a fresh cache, is counted malformed there (a
    None value is a delete: nothing held)."""
    cache = _cache()
    last: dict[str, bytes | None] = {}
    for revision, (key, value) in enumerate(events, start=1):
        event = WatchEvent("DELETE", KeyValue(key, b"", revision, 1, 0)) if value is None else _put(key, value, revision)
        cache._apply(WatchBatch([event]))
        last[key] = value
    expected = 0
    for key, value in last.items():
        if value is not None:
            alone = _cache()
            alone._apply(WatchBatch([_put(key, value, 1)]))
            expected += alone.statistics().malformed_count
    assert cache.statistics().malformed_held_count == expected
