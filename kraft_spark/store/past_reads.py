"""Reads of a key range at a revision, current or past: ``GET /v1/range`` (``api.range_route``)
and ``kraft-spark kv get --rev N`` / ``--from-key``.

A revision is etcd's (``kraft_spark.etcd.revision``): the state after every committed write at
offsets <= r; the current one is ``applied_offset - 1``. A past revision is read from the
node's MVCC history (``kraft_spark.store.history``), the one etcd's API reads at a revision, so
both APIs answer alike: a revision above the current one is a future revision, one below what
the history holds (``History.oldest``: its compaction point, or this node's start) is
compacted. Pure: a function of the state, the history and the request, read without yielding
(the caller holds one view).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kraft_spark.state.machine import Entry
from kraft_spark.store.history import History, Revision
from kraft_spark.store.key_range import FROM_KEY, in_range, prefix_end

__all__ = ["CompactedRevisionError", "FutureRevisionError", "PastRead", "key_range", "read_at"]


class FutureRevisionError(ValueError):
    """The revision asked is above the current one."""

    def __init__(self, revision: int, current: int) -> None:
        super().__init__(f"revision {revision} is a future revision (the current one is "
                         f"{current})")
        self.current = current


class CompactedRevisionError(ValueError):
    """The history no longer holds (or never held) the revision asked."""

    def __init__(self, revision: int, oldest: int) -> None:
        super().__init__(f"revision {revision} has been compacted: this node's history "
                         f"starts at revision {oldest}")
        self.oldest = oldest


@dataclass(frozen=True, slots=True)
class PastRead:
    """The live keys of the range at ``revision``, in key order after ``after`` (at most
    ``limit``), ``count``: how many keys the whole range holds then, ``more``: keys left after
    this page."""

    revision: int
    entries: list[tuple[bytes, Entry]]
    count: int
    more: bool


def key_range(key: bytes, *, prefix: bool, from_key: bool) -> tuple[bytes, bytes]:
    """(start, end) of etcd's range: ``key`` alone, every key under it, or from it on."""
    if prefix:
        return key, prefix_end(key)
    if from_key:
        return key, FROM_KEY
    return key, b""


def _entry(found: Revision) -> Entry | None:
    """The ``Entry`` of a live revision (the epoch and time of a past write are not kept)."""
    if found.value is None:
        return None
    return Entry(found.value, found.mod, 0, 0, found.create, found.version, found.lease)


def read_at(lookup: Callable[[bytes], Entry | None],
            items: Callable[[], Iterable[tuple[bytes, Entry]]], applied_offset: int,
            history: History, *, start: bytes, end: bytes, revision: int,
            after: bytes | None, limit: int) -> PastRead:
    """The range ``start``..``end`` (``key_range``) at ``revision`` (0: the current one) of a
    state that applied every offset below ``applied_offset`` (``lookup``/``items``: its keys)
    and its ``history`` (fed up to that state)."""
    current = max(applied_offset - 1, 0)
    if revision > current:
        raise FutureRevisionError(revision, current)
    selected: list[tuple[bytes, Entry]]
    if revision <= 0 or revision == current:
        revision = current
        if not end:
            entry = lookup(start)
            selected = [(start, entry)] if entry is not None else []
        else:
            selected = sorted((k, e) for k, e in items() if in_range(k, start, end))
    else:
        if revision < history.oldest or history.revision != current:
            # (a history not in step with the state answers nothing rather than a wrong one)
            raise CompactedRevisionError(revision, history.oldest)
        selected = [(k, e) for k, r in history.range(start, end, revision)
                    if (e := _entry(r)) is not None]
    page = [(k, e) for k, e in selected if after is None or k > after]
    return PastRead(revision, page[:limit], len(selected), len(page) > limit)
