"""Record: one decoded record of a batch, with its absolute offset and timestamp."""

from __future__ import annotations

from operator import itemgetter


class Record(tuple):
    """One record: (offset, timestamp_ms, key, value, headers), read-only.

    A tuple subclass with named fields, built like a struct sequence (os.stat_result) from
    one 5-item sequence: ``Record((offset, timestamp_ms, key, value, headers))``.  Keeping
    tuple's own constructor is deliberate: decoding builds one Record per record and a
    Python-level ``__new__`` would cost a third of the decoder's per-record budget.

    - ``offset``: absolute offset (batch base offset + the record's offset delta);
    - ``timestamp_ms``: batch base timestamp + the record's delta, or the batch
      maxTimestamp for every record of a LogAppendTime batch;
    - ``key`` / ``value``: bytes, or None for a null key / a tombstone;
    - ``headers``: tuple of (str key, bytes-or-None value) pairs, in order.
    """

    __slots__ = ()

    _fields = ("offset", "timestamp_ms", "key", "value", "headers")

    offset = property(itemgetter(0), doc="Absolute offset of the record.")
    timestamp_ms = property(itemgetter(1), doc="Timestamp in milliseconds since the epoch.")
    key = property(itemgetter(2), doc="Key bytes, or None.")
    value = property(itemgetter(3), doc="Value bytes, or None (a tombstone).")
    headers = property(itemgetter(4), doc="Tuple of (key, value-or-None) header pairs.")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self))
        return f"Record({fields})"


assert len(Record._fields) == 5
