"""A compressed batch is decompressed once per append: the validation's decompressed records feed
the segment's time-step table, on every validation path (the records decoded one by one for a
compacted topic or a timestamp window, as well as the framing walk), and the table answers as
the per-target search does."""

from __future__ import annotations

import struct

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, batch, config, open_log

import seglog.records.batch as codec_batch
from seglog.records import ATTRIBUTES_OFFSET, CRC_OFFSET, LOG_OVERHEAD, RECORDS_OFFSET, CodecError, Compression, RecordBatch
from seglog.records.compression import compress
from seglog.records.crc import crc32c
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import InvalidRecordError
from seglog_server.storage.format import record_timestamps
from seglog_server.storage.log import log_validator
from seglog_server.storage.log.log_validator import LogValidator


@pytest.fixture
def decompressions(monkeypatch):
    """How many times a batch's records were decompressed (every module that does it)."""
    counted = [0]
    for module in (log_validator, codec_batch, record_timestamps):
        original = module.decompress

        def counting(*args, _original=original, **kwargs):
            counted[0] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, "decompress", counting)
    return counted


@pytest.mark.parametrize("overrides", [
    {"cleanup_policy": frozenset({"compact"})},
    {"message_timestamp_before_max_ms": 10 ** 12},
    {},
], ids=["compacted", "timestamp_window", "plain"])
def test_a_compressed_append_decompresses_its_records_once(tmp_path, decompressions, overrides):
    log = open_log(tmp_path, FakeClock(NOW_MS), config(**overrides))
    try:
        for first in (0, 100):  # each raises the table's maximum: each is walked for its steps
            values = [b"v%d" % n for n in range(20)]
            before = decompressions[0]
            log.append(batch(*values, keys=[b"k%d" % n for n in range(20)],
                             timestamps=[NOW_MS + first + n for n in range(20)], compression=Compression.GZIP))
            assert decompressions[0] - before == 1
        before = decompressions[0]
        answers = log.lookup_timestamps([NOW_MS + 5, NOW_MS + 110, NOW_MS + 500])
        assert [None if a is None else a.offset for a in answers] == [5, 30, None]
        assert decompressions[0] == before  # the table answered
    finally:
        log.close()


def test_a_compacted_topics_compressed_batch_with_a_record_without_key_is_still_refused(tmp_path):
    log = open_log(tmp_path, FakeClock(NOW_MS), config(cleanup_policy=frozenset({"compact"})))
    try:
        with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key"):
            log.append(batch(b"a", b"b", keys=[b"k", None], timestamps=[NOW_MS, NOW_MS],
                             compression=Compression.GZIP))
        assert log.log_end_offset == 0
    finally:
        log.close()


def _with_area(data: bytes, area: bytes, count: int) -> bytes:
    """``data`` (a gzip batch) with ``area`` as its records area, compressed, and ``count`` records
    (the last offset delta to match), its length and CRC fixed."""
    payload = compress(Compression.GZIP, area)
    buf = bytearray(data[:RECORDS_OFFSET]) + payload
    struct.pack_into(">i", buf, 8, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">i", buf, 23, count - 1)
    struct.pack_into(">i", buf, RECORDS_OFFSET - 4, count)
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


_VALID_AREA = batch(*[b"v%d" % n for n in range(3)], keys=[b"k%d" % n for n in range(3)], timestamps=NOW_MS)


@settings(max_examples=200, deadline=None)
@given(cut=st.one_of(st.just(1000), st.integers(0, 40)), noise=st.one_of(st.just(b""), st.binary(max_size=40)),
       count=st.sampled_from([3, 3, 1, 2, 5]))
def test_a_compressed_batch_decoded_from_its_area_answers_as_the_codecs_decode(cut, noise, count):
    """The compacted path decodes the area it decompressed, as ``RecordBatch.records`` decodes
    the batch: the same records, or the same refusal and message, on hostile areas."""
    area = bytes(_VALID_AREA[RECORDS_OFFSET:])[:cut] + noise
    view = memoryview(_with_area(batch(b"x", timestamps=NOW_MS, compression=Compression.GZIP), area, count))
    fields = struct.unpack_from(">qiibIhiqqqhii", view, 0)
    validator = LogValidator(config(cleanup_policy=frozenset({"compact"})), "topic-0")
    try:
        expected = ("records", RecordBatch(view).records())
    except CodecError as exc:  # the codec's refusal: the validator's, in its words
        expected = ("InvalidRecordError", f"topic-0: the batch's records cannot be decoded: {exc}")
    try:
        records, decompressed = validator._decode(view, fields)
        found = ("records", records)
        assert decompressed == area
    except InvalidRecordError as exc:
        found = ("InvalidRecordError", str(exc))
    event(found[0])
    assert found == expected
