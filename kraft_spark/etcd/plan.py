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

Not in phase 1 (``errors.unimplemented``): a read inside a Txn of a key the same Txn wrote
earlier (etcd shows the Txn's own write; this would need the write's offset before it exists).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraft_spark.etcd import errors
from kraft_spark.etcd.kv import View, compare_holds, key_value, range_response
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.state.machine import Entry
from kraft_spark.store.key_range import in_range
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
    _written: set[bytes] = field(default_factory=set)

    @property
    def conditions(self) -> list[Condition]:
        if len(self._keys) > MAX_CONDITIONS:
            raise errors.EtcdError("INVALID_ARGUMENT", f"etcdserver: too many operations in "
                                   f"txn request (kraft-spark guards at most {MAX_CONDITIONS} "
                                   "keys and ranges per request)")
        return list(self._keys.values())

    # ------------------------------------------------------------------ what the plan read

    def read(self, start: bytes, end: bytes) -> list[tuple[bytes, Entry]]:
        """The range as the view holds it, remembered as a guard."""
        if any(in_range(key, start, end) for key in self._written):
            raise errors.unimplemented("reading, in a Txn, a key the same Txn wrote")
        found = self.view.select(start, end)
        if (start, end) not in self._keys:
            self._keys[(start, end)] = self._guard(start, end, found)
        return found

    def _guard(self, start: bytes, end: bytes, found: list[tuple[bytes, Entry]]) -> Condition:
        if not end:  # one key: O(1) to judge
            if found:
                return Condition(start, mod_offset=found[0][1].offset)
            return Condition(start, exists=False)
        return Condition(start, since=self.view.applied, count=len(found), range_end=end)

    def write(self, item: Write) -> None:
        if item.key in self._written:
            raise errors.duplicate_key()
        self._written.add(item.key)
        self.writes.append(item)

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
        return response

    def range(self, req: rpc_pb2.RangeRequest) -> rpc_pb2.RangeResponse:
        self.read(req.key, req.range_end)  # the guard; the answer is the view's
        return range_response(self.view, req)

    def txn(self, req: rpc_pb2.TxnRequest) -> rpc_pb2.TxnResponse:
        succeeded = True
        for compare in req.compare:
            self.read(compare.key, compare.range_end)
            if not compare_holds(self.view, compare):
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
