"""etcd's Lease service over the store's leases (``kraft_spark.store.leases``): a grant and a
revocation are ``kraft.lease.op`` records, as the HTTP API appends them (``api.leases``), with
the same owner rule (a non-admin credential keeps alive and revokes only the leases it
granted). etcd's TTLs are seconds, the store's milliseconds.

A keep-alive and TimeToLive are answered by the leader's countdown, as etcd's (which forwards
both to the leader): this node's own lease desk when it leads, else the leader's over the wire
(``NodeStore.lease_countdown``). A keep-alive writes nothing to the log, unless the lease's
last checkpoint set a remaining TTL (``kraft_spark.store.lease_clock``).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

from api.etcd.context import REQUEST_TIMEOUT_S, EtcdContext, etcd_error
from api.etcd.permissions import check_lease_keys, current
from api.lease_writes import MAX_LEASE_ID
from kraft_spark.client.types import NewRecord
from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.http_auth import Identity, Scope
from kraft_spark.store.lease_clock import CountdownAnswer, CountdownRequest, CountdownStatus
from kraft_spark.store.leases import LEASE_OP_HEADER, MAX_TTL_MS, MIN_TTL_MS, NOT_OWNER, encode_op


def _caller(identity: object) -> str | None:
    """``by``: the caller's credential, which must own the lease; None for an admin (or a
    server without credentials), who may act on any lease."""
    if isinstance(identity, Identity) and identity.scope < Scope.ADMIN:
        return identity.name
    return None


class LeaseServicer:
    def __init__(self, ctx: EtcdContext) -> None:
        self._ctx = ctx

    def start(self) -> None:
        """Nothing runs in the background (the leader's countdowns are its expirer's)."""

    async def stop(self) -> None:
        """Nothing to stop."""

    async def _countdown(self, lease_id: int, renew: bool, identity: object) -> CountdownAnswer:
        """The leader's answer; NOT_FOUND as itself, any other failure as etcd's error."""
        request = CountdownRequest(lease_id, renew, _caller(identity),
                                   int(REQUEST_TIMEOUT_S * 1000))
        try:
            answer = await self._ctx.store.lease_countdown(request)
        except Exception as exc:
            raise etcd_error(exc) from None
        if answer.status in (CountdownStatus.OK, CountdownStatus.NOT_FOUND):
            return answer
        if answer.status is CountdownStatus.NOT_OWNER:
            raise errors.permission_denied()
        if answer.status is CountdownStatus.INVALID:
            raise errors.EtcdError("INVALID_ARGUMENT", f"etcdserver: {answer.message}")
        raise errors.timeout(answer.message or answer.status.name)

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
            answer = await self._countdown(request.ID, True, identity)
            # TTL 0: etcd's answer for a lease that is gone.
            ttl = answer.ttl_ms // 1000 if answer.status is CountdownStatus.OK else 0
            yield rpc_pb2.LeaseKeepAliveResponse(header=self._ctx.header(), ID=request.ID,
                                                 TTL=ttl)

    async def LeaseTimeToLive(self, request: rpc_pb2.LeaseTimeToLiveRequest, _context: Any,
                              _identity: object) -> rpc_pb2.LeaseTimeToLiveResponse:
        # etcd answers TimeToLive of any lease to any caller (its owner rule is for writes).
        answer = await self._countdown(request.ID, False, None)
        await self._ctx.read_view(serializable=False)
        lease = self._ctx.store.applied_state().leases.leases.get(request.ID)
        if answer.status is not CountdownStatus.OK or lease is None:
            # etcd: TTL -1 ("already expired"), not an error
            return rpc_pb2.LeaseTimeToLiveResponse(header=self._ctx.header(), ID=request.ID,
                                                   TTL=-1)
        response = rpc_pb2.LeaseTimeToLiveResponse(
            header=self._ctx.header(), ID=lease.lease_id, grantedTTL=lease.ttl_ms // 1000,
            TTL=answer.remaining_ms // 1000)
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
