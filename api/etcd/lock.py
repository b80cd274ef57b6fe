"""etcd's Lock service (``v3lockpb.Lock``), as etcd's server runs it
(``server/etcdserver/api/v3lock/lock.go``): clientv3's Mutex over the node's own KV, Lease and
Watch (``api.etcd.local``). Lock creates ``<name>/<lease hex>`` with the caller's lease (a new
60 s lease when 0, as etcd's session grants) and answers once every key of ``<name>/`` created
before it is deleted: unlocked, or gone with its lease. A caller that goes away while waiting
has its key deleted (Mutex.Unlock). Unlock deletes the key it is given."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from api.etcd.local import LocalClient
from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import rpc_pb2, v3lock_pb2
from kraft_spark.etcd.recipes import SESSION_EXPIRED, acquire, holds, my_revision, session_key


class LockServicer:
    def __init__(self, client: LocalClient) -> None:
        self._client = client

    async def Lock(self, request: v3lock_pb2.LockRequest, _context: Any,
                   identity: object) -> v3lock_pb2.LockResponse:
        client = self._client
        lease = await client.session_lease(request.lease, identity)
        prefix = request.name + b"/"
        response = await client.txn(acquire(prefix, lease), identity)
        revision = my_revision(response)
        key = session_key(prefix, lease)
        if holds(response, revision):
            return v3lock_pb2.LockResponse(header=response.header, key=key)
        try:
            await client.wait_deletes(prefix, revision - 1, identity)
        except BaseException:
            with contextlib.suppress(Exception):  # Mutex.Unlock, best effort
                await asyncio.shield(client.delete(key, identity))
            raise
        found = await client.range(rpc_pb2.RangeRequest(key=key), identity)
        if not found.kvs:  # its lease ended while it waited
            raise errors.EtcdError("UNKNOWN", SESSION_EXPIRED)
        return v3lock_pb2.LockResponse(header=found.header, key=key)

    async def Unlock(self, request: v3lock_pb2.UnlockRequest, _context: Any,
                     identity: object) -> v3lock_pb2.UnlockResponse:
        deleted = await self._client.delete(request.key, identity)
        return v3lock_pb2.UnlockResponse(header=deleted.header)
