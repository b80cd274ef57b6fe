"""``kraft_spark.store.past_reads.read_at`` (``GET /v1/range``): the current state or a past
revision from the MVCC history, pages that continue at the revision the first one read, and
etcd's two refusals (a future revision, a compacted one)."""

from __future__ import annotations

import pytest

from kraft_spark.state.machine import Entry
from kraft_spark.store.history import History
from kraft_spark.store.key_range import FROM_KEY, prefix_end
from kraft_spark.store.past_reads import (
    CompactedRevisionError,
    FutureRevisionError,
    key_range,
    read_at,
)


def _fed() -> tuple[dict[bytes, Entry], History, int]:
    """Writes at offsets 1..5 (a/1, a/2, b, a/1 again, then a/2 deleted): the state after
    them, the history fed alike, and the applied offset."""
    history = History(retention=1000)
    state: dict[bytes, Entry] = {}
    writes: list[tuple[int, bytes, bytes | None]] = [
        (1, b"a/1", b"1"), (2, b"a/2", b"2"), (3, b"b", b"3"), (4, b"a/1", b"4"),
        (5, b"a/2", None)]
    for offset, key, value in writes:
        if value is None:
            history.delete(offset, key)
            state.pop(key, None)
        else:
            before = state.get(key)
            history.put(offset, key, value)
            state[key] = Entry(value, offset, 1, 0, before.create_offset if before else offset,
                               before.version + 1 if before else 1)
        history.advance(offset + 1)
    return state, history, 6


def _read(revision: int, start: bytes, end: bytes, *, after: bytes | None = None,
          limit: int = 100) -> tuple[int, list[tuple[bytes, bytes, int]], int, bool]:
    state, history, applied = _fed()
    got = read_at(state.get, state.items, applied, history, start=start, end=end,
                  revision=revision, after=after, limit=limit)
    return (got.revision, [(k, e.value, e.version) for k, e in got.entries], got.count,
            got.more)


def test_now_and_the_past() -> None:
    assert _read(0, b"a/", prefix_end(b"a/")) == (5, [(b"a/1", b"4", 2)], 1, False)
    assert _read(2, b"a/", prefix_end(b"a/")) == (
        2, [(b"a/1", b"1", 1), (b"a/2", b"2", 1)], 2, False)
    assert _read(4, b"a/1", b"") == (4, [(b"a/1", b"4", 2)], 1, False)
    assert _read(3, b"a/2", FROM_KEY) == (3, [(b"a/2", b"2", 1), (b"b", b"3", 1)], 2, False)


def test_pages_continue_after_a_key_at_one_revision() -> None:
    assert _read(3, b"", FROM_KEY, limit=2) == (
        3, [(b"a/1", b"1", 1), (b"a/2", b"2", 1)], 3, True)
    assert _read(3, b"", FROM_KEY, after=b"a/2", limit=2) == (3, [(b"b", b"3", 1)], 3, False)


def test_a_future_or_a_compacted_revision_is_refused() -> None:
    with pytest.raises(FutureRevisionError, match="revision 6 is a future revision"):
        _read(6, b"a/1", b"")
    state, history, applied = _fed()
    history.compact(3)
    with pytest.raises(CompactedRevisionError, match="starts at revision 3") as refused:
        read_at(state.get, state.items, applied, history, start=b"a/1", end=b"",
                revision=2, after=None, limit=10)
    assert refused.value.oldest == 3


def test_key_range_is_etcds() -> None:
    assert key_range(b"k", prefix=False, from_key=False) == (b"k", b"")
    assert key_range(b"k/", prefix=True, from_key=False) == (b"k/", b"k0")
    assert key_range(b"k", prefix=False, from_key=True) == (b"k", FROM_KEY)
