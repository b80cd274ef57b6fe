"""The records an append takes: stamped once (kraft_spark.client.types.stamped)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from kraft_spark.client.types import NewRecord, stamped
from kraft_spark.raft.records import Record


def test_records_already_stamped_pass_through_as_they_are() -> None:
    taken = [Record(b"k", b"v", 1234, (("h", b"x"),)), Record(b"k2", None, 1235)]
    out = stamped(taken)
    assert out == tuple(taken)
    assert all(a is b for a, b in zip(out, taken, strict=True))  # not rebuilt


def test_new_records_get_the_time_of_now_and_stamped_ones_keep_theirs() -> None:
    before = int(time.time() * 1000)
    out = stamped([NewRecord(b"a", b"1", (("h", b"x"),)), Record(b"b", b"2", 7)])
    after = int(time.time() * 1000)
    assert type(out[0]) is Record and before <= out[0].timestamp_ms <= after
    assert (out[0].key, out[0].value, out[0].headers) == (b"a", b"1", (("h", b"x"),))
    assert out[1] == Record(b"b", b"2", 7)


def test_a_record_stays_a_frozen_value() -> None:
    """Record declares its own __init__ (faster than the generated one): still frozen, equal
    and hashable by value, with the generated one's defaults and keywords."""
    record = Record(key=b"k", value=b"v")
    assert record == Record(b"k", b"v", 0, ())
    assert hash(record) == hash(Record(b"k", b"v"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.key = b"other"  # type: ignore[misc]
    assert dataclasses.replace(record, timestamp_ms=5) == Record(b"k", b"v", 5)
