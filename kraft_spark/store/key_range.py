"""Key ranges as etcd names them: ``key`` alone (``end`` empty), ``[key, end)`` in byte order,
or every key from ``key`` on (``end`` = ``b"\\0"``; with ``key`` = ``b"\\0"`` too: every key).
Shared by the state machine (range conditions, ``store.txn``) and etcd's API (Range,
DeleteRange, Watch), so both select exactly the same keys. Pure functions."""

from __future__ import annotations

from typing import Final

FROM_KEY: Final = b"\0"


def in_range(key: bytes, start: bytes, end: bytes) -> bool:
    """Whether ``key`` is in the range ``start``..``end`` (etcd's meaning of ``range_end``)."""
    if not end:
        return key == start
    if end == FROM_KEY:
        return key >= start
    return start <= key < end


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` of every key under ``prefix`` (etcd's ``GetPrefixRangeEnd``): the
    prefix with its last byte below 0xff incremented; ``b"\\0"`` (every key) if there is none."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return FROM_KEY
    return stripped[:-1] + bytes([stripped[-1] + 1])


def watch_prefix(start: bytes, end: bytes) -> bytes | None:
    """The narrowest prefix holding the whole range (None: the single key ``start``); a watch
    on it, filtered by :func:`in_range`, sees exactly the range's writes."""
    if not end:
        return None
    if end == FROM_KEY:
        return b""
    if prefix_end(start) == end:
        return start
    common = 0
    while common < min(len(start), len(end)) and start[common] == end[common]:
        common += 1
    return start[:common]
