"""etcd's KV service: Range, Put, DeleteRange, Txn (``kraft_spark.etcd.plan``: one view per
request, writes appended as one guarded group; a Range at a past revision reads the node's MVCC
history, ``kraft_spark.store.history``), and Compact. Every call's keys are checked against
its caller's permissions first (``api.etcd.permissions``).

Compact is replicated, as etcd's goes through raft: a keyless ``kraft.etcd.compact`` record
(``kraft_spark.store.history_feed``) that every replica's history applies at its offset, so
every node compacts at the same point of the log; the answer waits until this node applied
it. ``physical`` changes nothing more: the history is in memory, compacted as it applies."""

from __future__ import annotations

from typing import Any

from api.etcd.context import EtcdContext
from api.etcd.permissions import check_delete, check_put, check_read, check_txn, current
from kraft_spark.client.types import NewRecord
from kraft_spark.etcd import errors
from kraft_spark.etcd.kv import range_response
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.etcd.plan import Plan
from kraft_spark.store.history_feed import compact_header


class KvServicer:
    def __init__(self, ctx: EtcdContext) -> None:
        self._ctx = ctx

    async def Range(self, request: rpc_pb2.RangeRequest, _context: Any,
                    identity: object) -> rpc_pb2.RangeResponse:
        if not request.serializable:  # a serializable read judges on this node's state
            identity = await current(identity, self._ctx)
        check_read(identity, request.key, request.range_end)
        view = await self._ctx.read_view(serializable=request.serializable)
        response = range_response(view, request)  # synchronous: one state
        response.header.CopyFrom(self._ctx.header(view.revision))
        return response

    async def Put(self, request: rpc_pb2.PutRequest, _context: Any,
                  identity: object) -> rpc_pb2.PutResponse:
        check_put(await current(identity, self._ctx), request, self._ctx.lease_keys)
        if request.ignore_value or request.ignore_lease:  # may fail on what it reads
            await self._ctx.read_view(serializable=False)
        response, revision = await self._ctx.write(lambda plan: plan.put(request))
        response.header.CopyFrom(self._ctx.header(revision))
        return response

    async def DeleteRange(self, request: rpc_pb2.DeleteRangeRequest, _context: Any,
                          identity: object) -> rpc_pb2.DeleteRangeResponse:
        check_delete(await current(identity, self._ctx), request)
        # A delete that finds nothing appends nothing and answers from this node's view: only
        # after the read index is that view linearizable (a lagging node, one just restarted
        # say, may not have applied a put the client already saw acknowledged).
        await self._ctx.read_view(serializable=False)
        response, revision = await self._ctx.write(lambda plan: plan.delete_range(request))
        response.header.CopyFrom(self._ctx.header(revision))
        return response

    async def Txn(self, request: rpc_pb2.TxnRequest, _context: Any,
                  identity: object) -> rpc_pb2.TxnResponse:
        check_txn(await current(identity, self._ctx), request, self._ctx.lease_keys)
        # A Txn that only reads answers from one view after the read index (linearizable);
        # one that writes is judged where its guarded group lands (the read index is then
        # unnecessary but harmless: it only makes the first plan's view fresher).
        await self._ctx.read_view(serializable=False)
        response, revision = await self._ctx.write(lambda plan: _txn(plan, request))
        response.header.CopyFrom(self._ctx.header(revision))
        return response

    async def Compact(self, request: rpc_pb2.CompactionRequest, _context: Any,
                      _identity: object) -> rpc_pb2.CompactionResponse:
        ctx = self._ctx
        view = await ctx.read_view(serializable=False)
        # etcd's checks, against this node's view after the read index: at or below the
        # point already compacted, or above the current revision, nothing is appended.
        if request.revision <= ctx.store.history.compacted:
            raise errors.compacted()
        if request.revision > view.revision:
            raise errors.future_revision()
        await ctx.append([NewRecord(None, None, (compact_header(request.revision),))])
        return rpc_pb2.CompactionResponse(header=ctx.header())


def _txn(plan: Plan, request: rpc_pb2.TxnRequest) -> rpc_pb2.TxnResponse:
    return plan.txn(request)
