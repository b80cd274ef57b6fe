"""etcd's Range and Compare over one view of the state (pure: no I/O, no gRPC).

A :class:`View` is the state machine as applied below ``applied`` (``KeyValueState``), read
synchronously: every function here runs to completion without yielding, so what it returns is
one consistent state, as etcd's reads at one revision are. Selection, filters, sort, limit and
count follow etcd's ``applyRange`` (``server/etcdserver/txn``): ``count`` is the number of keys
in the range before the revision filters and the limit, ``more`` says the limit cut some off.
A read at a past revision answers from the view's MVCC history (``kraft_spark.store.history``)
with every option alike; the caller's header keeps the current revision, as etcd's does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import kv_pb2, rpc_pb2
from kraft_spark.etcd.revision import header_revision
from kraft_spark.state.machine import Entry
from kraft_spark.store.history import History, Revision
from kraft_spark.store.key_range import in_range

RangeRequest = rpc_pb2.RangeRequest
Compare = rpc_pb2.Compare


@dataclass(frozen=True, slots=True)
class View:
    """The state as applied below ``applied``: ``lookup`` one key, ``items`` every live key;
    ``history``: the past revisions (fed up to ``applied``; None: none kept)."""

    lookup: Callable[[bytes], Entry | None]
    items: Callable[[], Iterable[tuple[bytes, Entry]]]
    applied: int
    history: History | None = None

    @property
    def revision(self) -> int:
        return header_revision(self.applied)

    def select(self, start: bytes, end: bytes) -> list[tuple[bytes, Entry]]:
        """The live keys of the range, in key order."""
        if not end:
            entry = self.lookup(start)
            return [(start, entry)] if entry is not None else []
        return sorted((k, e) for k, e in self.items() if in_range(k, start, end))


def key_value(key: bytes, entry: Entry, *, keys_only: bool = False) -> kv_pb2.KeyValue:
    return kv_pb2.KeyValue(key=key, create_revision=entry.create_offset,
                           mod_revision=entry.offset, version=entry.version,
                           value=b"" if keys_only else entry.value, lease=entry.lease)


def _entry(revision: Revision | None) -> Entry | None:
    if revision is None or revision.value is None:
        return None
    return Entry(revision.value, revision.mod, 0, 0, revision.create, revision.version,
                 revision.lease)


def at_revision(view: View, revision: int) -> View:
    """The view a read at ``revision`` answers from (0: the current one): etcd's
    ``ErrFutureRev`` above the current one, ``ErrCompacted`` below what the history holds."""
    if revision <= 0 or revision == view.revision:
        return view
    if revision > view.revision:
        raise errors.future_revision()
    history = view.history
    if history is None or revision < history.oldest or history.revision != view.revision:
        # (a history not in step with the view answers nothing rather than a wrong state)
        raise errors.compacted()

    def items() -> Iterable[tuple[bytes, Entry]]:
        for key, found in history.items(revision):
            entry = _entry(found)
            if entry is not None:
                yield key, entry

    return View(lambda key: _entry(history.get(key, revision)), items, revision + 1)


_SORT_KEYS: dict[int, Callable[[tuple[bytes, Entry]], Any]] = {
    RangeRequest.KEY: lambda item: item[0],
    RangeRequest.VERSION: lambda item: item[1].version,
    RangeRequest.CREATE: lambda item: item[1].create_offset,
    RangeRequest.MOD: lambda item: item[1].offset,
    RangeRequest.VALUE: lambda item: item[1].value,
}


def range_response(view: View, req: rpc_pb2.RangeRequest) -> rpc_pb2.RangeResponse:
    """etcd's RangeResponse to ``req`` from ``view`` (the header is the caller's)."""
    if not req.key:
        raise errors.empty_key()
    view = at_revision(view, req.revision)
    found = view.select(req.key, req.range_end)
    count = len(found)

    def kept(entry: Entry) -> bool:
        return not (
            (req.min_mod_revision and entry.offset < req.min_mod_revision)
            or (req.max_mod_revision and entry.offset > req.max_mod_revision)
            or (req.min_create_revision and entry.create_offset < req.min_create_revision)
            or (req.max_create_revision and entry.create_offset > req.max_create_revision))

    if (req.min_mod_revision or req.max_mod_revision or req.min_create_revision
            or req.max_create_revision):
        found = [(k, e) for k, e in found if kept(e)]
    order = req.sort_order
    if order == RangeRequest.NONE and req.sort_target != RangeRequest.KEY:
        order = RangeRequest.ASCEND  # etcd: a sort target without an order is ascending
    if order != RangeRequest.NONE and not (
            order == RangeRequest.ASCEND and req.sort_target == RangeRequest.KEY):
        # Stable on key order, as etcd's sort of a key-ordered range.
        found.sort(key=_SORT_KEYS[req.sort_target], reverse=order == RangeRequest.DESCEND)
    more = False
    if req.limit > 0 and len(found) > req.limit:
        found, more = found[:req.limit], True
    response = rpc_pb2.RangeResponse(count=count, more=more)
    if not req.count_only:
        response.kvs.extend(key_value(k, e, keys_only=req.keys_only) for k, e in found)
    return response


def _target(compare: rpc_pb2.Compare, entry: Entry | None) -> tuple[Any, Any]:
    """(the key's value of the compared target, the compare's operand)."""
    target = compare.target
    if target == Compare.VERSION:
        return (entry.version if entry else 0), compare.version
    if target == Compare.CREATE:
        return (entry.create_offset if entry else 0), compare.create_revision
    if target == Compare.MOD:
        return (entry.offset if entry else 0), compare.mod_revision
    if target == Compare.LEASE:
        return (entry.lease if entry else 0), compare.lease
    return (entry.value if entry else b""), compare.value


def _holds(compare: rpc_pb2.Compare, entry: Entry | None) -> bool:
    mine, theirs = _target(compare, entry)
    result = compare.result
    if result == Compare.EQUAL:
        return bool(mine == theirs)
    if result == Compare.NOT_EQUAL:
        return bool(mine != theirs)
    if result == Compare.GREATER:
        return bool(mine > theirs)
    return bool(mine < theirs)


def compare_holds(view: View, compare: rpc_pb2.Compare) -> bool:
    """etcd's ``applyCompare``: every key of the range satisfies it; an absent key compares
    as version/create/mod/lease 0, and never satisfies a VALUE compare."""
    found = view.select(compare.key, compare.range_end)
    if not found:
        return compare.target != Compare.VALUE and _holds(compare, None)
    return all(_holds(compare, entry) for _, entry in found)
