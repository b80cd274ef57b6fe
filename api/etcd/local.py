"""An in-process etcd client over the node's own servicers (KV, Lease, Watch), as etcd's Lock
and Election services use a ``clientv3.Client`` of their own server: every request goes
through the same planning, guards and watch hub as a remote caller's, with the caller's
identity. Plus the recipes' waiting loop (``concurrency.waitDeletes``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from api.etcd.kv import KvServicer
from api.etcd.lease import LeaseServicer
from api.etcd.watch import WatchServicer
from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import kv_pb2, rpc_pb2
from kraft_spark.etcd.recipes import SESSION_TTL_S, last_created_before


class LocalClient:
    """The servicers a recipe calls, and who calls (``identity``: the caller's)."""

    def __init__(self, kv: KvServicer, leases: LeaseServicer, watch: WatchServicer) -> None:
        self.kv = kv
        self.leases = leases
        self.watches = watch

    async def txn(self, request: rpc_pb2.TxnRequest, identity: object) -> rpc_pb2.TxnResponse:
        return await self.kv.Txn(request, None, identity)

    async def range(self, request: rpc_pb2.RangeRequest, identity: object
                    ) -> rpc_pb2.RangeResponse:
        return await self.kv.Range(request, None, identity)

    async def delete(self, key: bytes, identity: object) -> rpc_pb2.DeleteRangeResponse:
        return await self.kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=key), None, identity)

    async def session_lease(self, lease: int, identity: object) -> int:
        """``concurrency.NewSession(WithLease(lease))``: the lease itself, or a new one of
        ``SESSION_TTL_S`` when 0 (nobody keeps it alive: the session is orphaned at once, as
        etcd's Lock and Election servers do). A lease that does not exist is found missing
        by the first write that attaches it (``requested lease not found``)."""
        if lease:
            return lease
        granted = await self.leases.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=SESSION_TTL_S),
                                               None, identity)
        return granted.ID

    async def watch(self, create: rpc_pb2.WatchCreateRequest, identity: object
                    ) -> AsyncGenerator[rpc_pb2.WatchResponse, None]:
        """One watch's responses after its creation (cancelled: EtcdError); ends the watch
        when the caller stops iterating."""

        async def requests() -> AsyncIterator[rpc_pb2.WatchRequest]:
            yield rpc_pb2.WatchRequest(create_request=create)
            await asyncio.Event().wait()  # the stream stays open until closed

        stream: Any = self.watches.Watch(requests(), None, identity)
        try:
            async for response in stream:
                if response.canceled:
                    raise errors.EtcdError("UNKNOWN", response.cancel_reason
                                           or "etcdserver: watch canceled")
                if not response.created:
                    yield response
        finally:
            await stream.aclose()

    async def wait_delete(self, key: bytes, revision: int, identity: object) -> None:
        """``concurrency.waitDelete``: until ``key`` is deleted at or after ``revision``."""
        responses = self.watch(rpc_pb2.WatchCreateRequest(key=key, start_revision=revision),
                               identity)
        try:
            async for response in responses:
                if any(e.type == kv_pb2.Event.DELETE for e in response.events):
                    return
        finally:
            await responses.aclose()
        raise errors.EtcdError("UNKNOWN", "lost watcher waiting for delete")

    async def wait_deletes(self, prefix: bytes, max_create: int, identity: object) -> None:
        """``concurrency.waitDeletes``: until every key of ``prefix`` created at or before
        ``max_create`` is deleted, newest first."""
        while True:
            found = await self.range(last_created_before(prefix, max_create), identity)
            if not found.kvs:
                return
            await self.wait_delete(found.kvs[0].key, found.header.revision, identity)
