"""etcd's Lease service over the store's leases (``kraft_spark.store.leases``): every grant,
keep-alive and revocation is a ``kraft.lease.op`` record, as the HTTP API appends them
(``api.leases``), with the same owner rule (a non-admin credential keeps alive and revokes only
the leases it granted). etcd's TTLs are seconds, the store's milliseconds.

TimeToLive's remaining time is this node's countdown (a ``LeaseClock`` ticked every
``TICK_S``, restarted when it sees a newer keep-alive applied): the leader's own may be up to
``TICK_S`` plus the replication delay shorter. A keep-alive is a replicated write here (etcd's
is not): fine for the lease counts of phase 1, not for tens of thousands of clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any, Final

from api.etcd.context import EtcdContext
from api.etcd.permissions import check_lease_keys, current
from api.lease_writes import MAX_LEASE_ID
from kraft_spark.client.types import NewRecord
from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.http_auth import Identity, Scope
from kraft_spark.store.lease_expiry import LeaseClock
from kraft_spark.store.leases import LEASE_OP_HEADER, MAX_TTL_MS, MIN_TTL_MS, NOT_OWNER, encode_op

TICK_S: Final = 0.5


class LeaseServicer:
    def __init__(self, ctx: EtcdContext) -> None:
        self._ctx = ctx
        self._clock = LeaseClock()
        self._ticker: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker

    async def _tick_forever(self) -> None:
        while True:
            self._tick()
            await asyncio.sleep(TICK_S)

    def _tick(self) -> None:
        # "leading" for this clock only: it counts, never expires (the leader's expirer does).
        self._clock.tick(True, self._ctx.store.applied_state().leases.leases)

    async def _operate(self, op: str, lease_id: int, identity: object, **fields: int | str
                       ) -> None:
        if isinstance(identity, Identity):
            if op == "grant":
                fields["owner"] = identity.name
            elif identity.scope < Scope.ADMIN:
                fields["by"] = identity.name
        record = NewRecord(None, None, ((LEASE_OP_HEADER, encode_op(op, lease_id, **fields)),))
        _, reason = await self._ctx.append([record])
        if not reason:
            return
        if "not found" in reason:
            raise errors.lease_not_found()
        if "already exists" in reason:
            raise errors.lease_exists()
        if NOT_OWNER in reason:
            raise errors.permission_denied()
        raise errors.EtcdError("FAILED_PRECONDITION", f"etcdserver: {reason}")

    async def LeaseGrant(self, request: rpc_pb2.LeaseGrantRequest, _context: Any,
                         identity: object) -> rpc_pb2.LeaseGrantResponse:
        ttl_ms = max(request.TTL * 1000, MIN_TTL_MS)
        if ttl_ms > MAX_TTL_MS:
            raise errors.lease_ttl_too_large()
        if request.ID < 0 or request.ID > MAX_LEASE_ID:
            raise errors.EtcdError("INVALID_ARGUMENT", "etcdserver: lease ID out of range")
        # Random ids below 2**53, as the HTTP API's: exact in every JSON client too.
        lease_id = request.ID or secrets.randbits(52) + 1
        await self._operate("grant", lease_id, identity, ttl_ms=ttl_ms)
        return rpc_pb2.LeaseGrantResponse(header=self._ctx.header(), ID=lease_id,
                                          TTL=ttl_ms // 1000)

    async def LeaseRevoke(self, request: rpc_pb2.LeaseRevokeRequest, _context: Any,
                          identity: object) -> rpc_pb2.LeaseRevokeResponse:
        # etcd's checkLeasePuts, on the keys on it as of now
        check_lease_keys(await current(identity, self._ctx), request.ID, self._ctx.lease_keys)
        await self._operate("revoke", request.ID, identity)
        return rpc_pb2.LeaseRevokeResponse(header=self._ctx.header())

    async def LeaseKeepAlive(self, requests: AsyncIterator[rpc_pb2.LeaseKeepAliveRequest],
                             _context: Any, identity: object
                             ) -> AsyncIterator[rpc_pb2.LeaseKeepAliveResponse]:
        async for request in requests:
            try:
                await self._operate("keepalive", request.ID, identity)
            except errors.EtcdError as exc:
                if exc.code != "NOT_FOUND":
                    raise
                ttl = 0  # etcd's answer for a lease that is gone
            else:
                lease = self._ctx.store.applied_state().leases.leases.get(request.ID)
                ttl = lease.ttl_ms // 1000 if lease is not None else 0
            yield rpc_pb2.LeaseKeepAliveResponse(header=self._ctx.header(), ID=request.ID,
                                                 TTL=ttl)

    async def LeaseTimeToLive(self, request: rpc_pb2.LeaseTimeToLiveRequest, _context: Any,
                              _identity: object) -> rpc_pb2.LeaseTimeToLiveResponse:
        await self._ctx.read_view(serializable=False)
        self._tick()
        lease = self._ctx.store.applied_state().leases.leases.get(request.ID)
        if lease is None:  # etcd: TTL -1 ("already expired"), not an error
            return rpc_pb2.LeaseTimeToLiveResponse(header=self._ctx.header(), ID=request.ID,
                                                   TTL=-1)
        remaining = self._clock.remaining_ms(lease.lease_id)
        response = rpc_pb2.LeaseTimeToLiveResponse(
            header=self._ctx.header(), ID=lease.lease_id, grantedTTL=lease.ttl_ms // 1000,
            TTL=(lease.ttl_ms if remaining is None else remaining) // 1000)
        if request.keys:
            response.keys.extend(sorted(lease.keys))
        return response

    async def LeaseLeases(self, _request: rpc_pb2.LeaseLeasesRequest, _context: Any,
                          _identity: object) -> rpc_pb2.LeaseLeasesResponse:
        view = await self._ctx.read_view(serializable=False)
        leases = self._ctx.store.applied_state().leases.leases
        return rpc_pb2.LeaseLeasesResponse(
            header=self._ctx.header(view.revision),
            leases=[rpc_pb2.LeaseStatus(ID=i) for i in sorted(leases)])
