"""Plans for etcd's write requests (Put, DeleteRange, Txn): what to append and what to answer.

**How a write stays atomic without a new state machine.** A request is planned against one
:class:`~kraft_spark.etcd.kv.View` of the local state (applied below offset R): its compares
are evaluated, its branch chosen, its reads answered, its deletes resolved to keys, its
``prev_kv`` taken. The plan's writes are then appended as one conditional group
(``kraft_spark.store.txn``) whose conditions say *everything the plan read is unchanged since
R*: a key read is still at its revision (or still absent), a range read still holds the same
number of keys, none written at or after R (``since``). Every replica's state machine judges
that where the group lands in the log, against the state right before it; if it holds, the
state there agrees with the view on everything the plan looked at, so the plan's outcome is
exactly what etcd would have computed at that log position: the request is atomic and
linearizable at its position. If it fails, nothing was written and the caller plans again on a
newer view (optimistic concurrency, as etcd's STM does client-side). The guards cost O(1) per
key and O(keys) per range on every replica.

A plan that writes nothing (a Range, a Txn whose branch only reads) appends nothing: the caller
answers it from a view taken after a read index (linearizable) or at once (serializable).

**Reading one's own writes.** Inside a Txn, an operation sees the writes of the operations
before it (etcd's rule; its lock and election recipes read the key they just put). The plan
keeps those writes in an overlay, all at the provisional revision ``R``, above every revision
of the view: the request's writes share one revision, the first offset of the group they land
in (``kraft_spark.store.txn``). Once the group landed at ``base``, :meth:`Plan.settle` moves
every revision at or above R in the response by ``base - R``; ``base`` is the revision the
response's header carries. Guards always describe the view, never the overlay.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kraft_spark.etcd import errors
from kraft_spark.etcd.kv import View, compare_holds, key_value, range_response
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.state.machine import Entry
from kraft_spark.store.txn import MAX_CONDITIONS, Condition


@dataclass(frozen=True, slots=True)
class Write:
    """One record: a put (``value`` not None, attached to ``lease`` if not 0) or a delete."""

    key: bytes
    value: bytes | None
    lease: int = 0


@dataclass(slots=True)
class Plan:
    """What a request appends (``writes``, in order, all or none) under ``conditions``."""

    view: View
    writes: list[Write] = field(default_factory=list)
    _keys: dict[tuple[bytes, bytes], Condition] = field(default_factory=dict)
    # The plan's own writes as an operation after them sees them (None: deleted).
    _overlay: dict[bytes, Entry | None] = field(default_factory=dict)
    _current: View | None = None

    @property
    def current(self) -> View:
        """The view with the plan's writes so far applied on top (``_overlay``)."""
        if self._current is None:
            overlay, base = self._overlay, self.view

            def lookup(key: bytes) -> Entry | None:
                return overlay[key] if key in overlay else base.lookup(key)

            def items() -> Iterator[tuple[bytes, Entry]]:
                for key, entry in base.items():
                    if key not in overlay:
                        yield key, entry
                for key, written in overlay.items():
                    if written is not None:
                        yield key, written

            # A read at a past revision reads the history: the overlay is the plan's
            # writes, all after every past revision.
            self._current = View(lookup, items, base.applied, base.history)
        return self._current

    @property
    def conditions(self) -> list[Condition]:
        if len(self._keys) > MAX_CONDITIONS:
            raise errors.EtcdError("INVALID_ARGUMENT", f"etcdserver: too many operations in "
                                   f"txn request (kraft-spark guards at most {MAX_CONDITIONS} "
                                   "keys and ranges per request)")
        return list(self._keys.values())

    # ------------------------------------------------------------------ what the plan read

    def read(self, start: bytes, end: bytes) -> list[tuple[bytes, Entry]]:
        """The range as the plan sees it (its own writes included); the view's is guarded."""
        if (start, end) not in self._keys:
            self._keys[(start, end)] = self._guard(start, end, self.view.select(start, end))
        if not self._overlay:
            return self.view.select(start, end)
        return self.current.select(start, end)

    def _guard(self, start: bytes, end: bytes, found: list[tuple[bytes, Entry]]) -> Condition:
        if not end:  # one key: O(1) to judge
            if found:
                return Condition(start, mod_offset=found[0][1].offset)
            return Condition(start, exists=False)
        return Condition(start, since=self.view.applied, count=len(found), range_end=end)

    def write(self, item: Write) -> None:
        if item.key in self._overlay:
            raise errors.duplicate_key()
        old = self.view.lookup(item.key)
        if item.value is None:
            self._overlay[item.key] = None
        else:
            offset = self.view.applied  # the request's revision, provisional: see settle
            self._overlay[item.key] = Entry(
                item.value, offset, 0, 0, old.create_offset if old is not None else offset,
                old.version + 1 if old is not None else 1, item.lease)
        self.writes.append(item)

    def settle(self, response: rpc_pb2.TxnResponse, base_offset: int) -> None:
        """Move the provisional revisions of ``response`` (>= the view's applied offset: the
        plan's own writes) to where the group landed, ``base_offset``."""
        floor, shift = self.view.applied, base_offset - self.view.applied
        for op in response.responses:
            kind = op.WhichOneof("response")
            if kind == "response_txn":
                self.settle(op.response_txn, base_offset)
                continue
            header = getattr(op, kind).header
            if header.revision >= floor:
                header.revision += shift
            if kind == "response_range":
                for kv in op.response_range.kvs:
                    if kv.mod_revision >= floor:
                        kv.mod_revision += shift
                    if kv.create_revision >= floor:
                        kv.create_revision += shift

    @property
    def revision_now(self) -> int:
        """The revision an operation of a Txn sees, as etcd's nested headers carry it: the
        view's, or after this plan's own writes theirs (provisional until :meth:`settle`)."""
        return self.view.applied if self.writes else self.view.revision

    # ------------------------------------------------------------------ requests

    def put(self, req: rpc_pb2.PutRequest) -> rpc_pb2.PutResponse:
        if not req.key:
            raise errors.empty_key()
        response = rpc_pb2.PutResponse()
        value, lease = req.value, req.lease
        if req.prev_kv or req.ignore_value or req.ignore_lease:
            found = self.read(req.key, b"")
            old = found[0][1] if found else None
            if (req.ignore_value or req.ignore_lease) and old is None:
                raise errors.key_not_found()
            if old is not None:
                if req.prev_kv:
                    response.prev_kv.CopyFrom(key_value(req.key, old))
                if req.ignore_value:
                    value = old.value
                if req.ignore_lease:
                    lease = old.lease
        self.write(Write(req.key, value, lease))
        response.header.revision = self.revision_now
        return response

    def delete_range(self, req: rpc_pb2.DeleteRangeRequest) -> rpc_pb2.DeleteRangeResponse:
        if not req.key:
            raise errors.empty_key()
        found = self.read(req.key, req.range_end)
        response = rpc_pb2.DeleteRangeResponse(deleted=len(found))
        if req.prev_kv:
            response.prev_kvs.extend(key_value(k, e) for k, e in found)
        for key, _ in found:
            self.write(Write(key, None))
        response.header.revision = self.revision_now
        return response

    def range(self, req: rpc_pb2.RangeRequest) -> rpc_pb2.RangeResponse:
        self.read(req.key, req.range_end)  # the guard
        response = range_response(self.current if self._overlay else self.view, req)
        # etcd gives a Range inside a Txn a header with the revision it read at (clientv3's
        # STM takes its snapshot revision from it).
        response.header.CopyFrom(rpc_pb2.ResponseHeader(revision=self.revision_now))
        return response

    def txn(self, req: rpc_pb2.TxnRequest) -> rpc_pb2.TxnResponse:
        succeeded = True
        for compare in req.compare:
            self.read(compare.key, compare.range_end)
            if not compare_holds(self.current if self._overlay else self.view, compare):
                succeeded = False
        response = rpc_pb2.TxnResponse(succeeded=succeeded)
        for op in (req.success if succeeded else req.failure):
            response.responses.append(self.op(op))
        return response

    def op(self, op: rpc_pb2.RequestOp) -> rpc_pb2.ResponseOp:
        kind = op.WhichOneof("request")
        if kind == "request_range":
            return rpc_pb2.ResponseOp(response_range=self.range(op.request_range))
        if kind == "request_put":
            return rpc_pb2.ResponseOp(response_put=self.put(op.request_put))
        if kind == "request_delete_range":
            return rpc_pb2.ResponseOp(
                response_delete_range=self.delete_range(op.request_delete_range))
        if kind == "request_txn":
            return rpc_pb2.ResponseOp(response_txn=self.txn(op.request_txn))
        raise errors.EtcdError("INVALID_ARGUMENT", "etcdserver: an empty operation in txn")
