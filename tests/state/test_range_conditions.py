"""The ``since`` condition (``kraft_spark.store.txn``): a range holds exactly N keys, none
written at or after offset R; what etcd's API guards its reads with."""

from __future__ import annotations

import pytest

from kraft_spark.raft.records import Batch, Record
from kraft_spark.state.machine import KeyValueState
from kraft_spark.store.key_range import in_range, prefix_end, watch_prefix
from kraft_spark.store.txn import TXN_HEADER, Condition, decode_header, encode_header


def _apply(state: KeyValueState, records: list[Record]) -> int:
    base = state.applied_offset
    state.apply(Batch(base, 1, tuple(records)))
    return base


def _guarded(condition: Condition, key: bytes, value: bytes | None) -> list[Record]:
    return [Record(key, value, 5, ((TXN_HEADER, encode_header(1, [condition])),))]


def _state() -> KeyValueState:
    state = KeyValueState()
    _apply(state, [Record(b"a/1", b"x", 5), Record(b"a/2", b"y", 5), Record(b"b", b"z", 5)])
    return state


def test_unchanged_range_holds() -> None:
    state = _state()
    since = state.applied_offset  # 3: the view a plan read
    base = _apply(state, _guarded(Condition(b"a/", since=since, count=2,
                                            range_end=prefix_end(b"a/")), b"c", b"1"))
    assert state.txn_failure(base) is None and state.get(b"c") is not None


@pytest.mark.parametrize("change", [
    [Record(b"a/3", b"new", 5)],  # a key created in the range: its offset >= since
    [Record(b"a/1", b"again", 5)],  # a key of the range written again
    [Record(b"a/1", None, 5)],  # a key deleted: the count drops
])
def test_any_change_in_the_range_since_fails_it(change: list[Record]) -> None:
    state = _state()
    since = state.applied_offset
    _apply(state, change)
    base = _apply(state, _guarded(Condition(b"a/", since=since, count=2,
                                            range_end=prefix_end(b"a/")), b"c", b"1"))
    assert state.txn_failure(base) is not None and state.get(b"c") is None


def test_writes_outside_the_range_do_not_matter() -> None:
    state = _state()
    since = state.applied_offset
    _apply(state, [Record(b"b", b"changed", 5), Record(b"a", b"below", 5)])
    base = _apply(state, _guarded(Condition(b"a/", since=since, count=2,
                                            range_end=prefix_end(b"a/")), b"c", b"1"))
    assert state.txn_failure(base) is None


def test_header_round_trip_and_validation() -> None:
    condition = Condition(b"k\xff", since=7, count=2, range_end=b"\0")
    size, parsed = decode_header(encode_header(1, [condition]))
    assert (size, parsed) == (1, (condition,))
    with pytest.raises(ValueError, match="go with since"):
        Condition(b"k", version=1, count=2)


def test_key_ranges_as_etcd() -> None:
    assert in_range(b"a", b"a", b"") and not in_range(b"ab", b"a", b"")
    assert in_range(b"zz", b"b", b"\0") and not in_range(b"a", b"b", b"\0")
    assert in_range(b"ab", b"a", b"b") and not in_range(b"b", b"a", b"b")
    assert prefix_end(b"a/") == b"a0" and prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff") == b"\0"
    assert watch_prefix(b"a/", b"a0") == b"a/" and watch_prefix(b"k", b"") is None
    assert watch_prefix(b"abc", b"abx") == b"ab" and watch_prefix(b"", b"\0") == b""
