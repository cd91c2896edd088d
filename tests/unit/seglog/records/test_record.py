"""Record: a read-only tuple with named fields."""

import pickle

import pytest

from seglog.records import Record

RECORD = Record((5, 1_700_000_000_000, b"k", b"v", (("h", None),)))


def test_fields_are_named():
    assert (RECORD.offset, RECORD.timestamp_ms, RECORD.key, RECORD.value, RECORD.headers) == (
        5,
        1_700_000_000_000,
        b"k",
        b"v",
        (("h", None),),
    )


def test_record_equals_the_plain_tuple_of_its_fields():
    assert RECORD == (5, 1_700_000_000_000, b"k", b"v", (("h", None),))


def test_fields_cannot_be_assigned():
    with pytest.raises(AttributeError):
        RECORD.offset = 6
    with pytest.raises(AttributeError):
        RECORD.extra = 1


def test_repr_names_the_fields():
    assert repr(RECORD) == "Record(offset=5, timestamp_ms=1700000000000, key=b'k', value=b'v', headers=(('h', None),))"


def test_record_pickles():
    assert pickle.loads(pickle.dumps(RECORD)) == RECORD
    assert type(pickle.loads(pickle.dumps(RECORD))) is Record
