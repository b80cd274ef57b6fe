"""etcd's Election service (``v3electionpb.Election``), as etcd's server runs it
(``server/etcdserver/api/v3election/election.go``): clientv3's Election over the node's own KV,
Lease and Watch (``api.etcd.local``). Campaign creates ``<name>/<lease hex>`` with the value
(a new 60 s lease when 0) and answers once every candidate created before it is gone; the
leader is the key of ``<name>/`` created first. Proclaim and Resign act only while the
leader's key is the one it created (``create_revision == rev``); Observe streams the leader
and each of its new values, then the next leader when it resigns or its lease ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from api.etcd.local import LocalClient
from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import kv_pb2, rpc_pb2, v3election_pb2
from kraft_spark.etcd.recipes import (
    MISSING_LEADER,
    NO_LEADER,
    NOT_LEADER,
    campaign,
    first_created,
    my_revision,
    proclaim,
    resign,
    session_key,
)
from kraft_spark.store.key_range import prefix_end

pb = v3election_pb2


class ElectionServicer:
    def __init__(self, client: LocalClient) -> None:
        self._client = client

    async def Campaign(self, request: pb.CampaignRequest, _context: Any,
                       identity: object) -> pb.CampaignResponse:
        client = self._client
        lease = await client.session_lease(request.lease, identity)
        prefix = request.name + b"/"
        key = session_key(prefix, lease)
        response = await client.txn(campaign(prefix, lease, request.value), identity)
        revision = my_revision(response)
        if not response.succeeded and response.responses[0].response_range.kvs[0].value \
                != request.value:
            try:
                await self._proclaim(key, revision, lease, request.value, identity)
            except errors.EtcdError:
                await client.txn(resign(key, revision), identity)
                raise
        try:
            await client.wait_deletes(prefix, revision - 1, identity)
        except asyncio.CancelledError:  # the caller went away: Resign, as etcd does
            with contextlib.suppress(Exception):
                await asyncio.shield(client.txn(resign(key, revision), identity))
            raise
        return pb.CampaignResponse(header=response.header, leader=pb.LeaderKey(
            name=request.name, key=key, rev=revision, lease=lease))

    async def _proclaim(self, key: bytes, revision: int, lease: int, value: bytes,
                        identity: object) -> rpc_pb2.TxnResponse:
        response = await self._client.txn(proclaim(key, revision, lease, value), identity)
        if not response.succeeded:
            raise errors.EtcdError("UNKNOWN", NOT_LEADER)
        return response

    async def Proclaim(self, request: pb.ProclaimRequest, _context: Any,
                       identity: object) -> pb.ProclaimResponse:
        if not request.HasField("leader"):
            raise errors.EtcdError("UNKNOWN", MISSING_LEADER)
        leader = request.leader
        lease = await self._client.session_lease(leader.lease, identity)
        response = await self._proclaim(leader.key, leader.rev, lease, request.value,
                                         identity)
        return pb.ProclaimResponse(header=response.header)

    async def Resign(self, request: pb.ResignRequest, _context: Any,
                     identity: object) -> pb.ResignResponse:
        if not request.HasField("leader"):
            raise errors.EtcdError("UNKNOWN", MISSING_LEADER)
        leader = request.leader
        response = await self._client.txn(resign(leader.key, leader.rev), identity)
        return pb.ResignResponse(header=response.header)

    async def Leader(self, request: pb.LeaderRequest, _context: Any,
                     identity: object) -> pb.LeaderResponse:
        found = await self._client.range(first_created(request.name + b"/"), identity)
        if not found.kvs:
            raise errors.EtcdError("UNKNOWN", NO_LEADER)
        return pb.LeaderResponse(header=found.header, kv=found.kvs[0])

    async def Observe(self, request: pb.LeaderRequest, _context: Any,
                      identity: object) -> AsyncIterator[pb.LeaderResponse]:
        """concurrency.Election.observe: the leader (waiting for one), then its new values
        until its key is deleted, then again."""
        client, prefix = self._client, request.name + b"/"
        while True:
            found = await client.range(first_created(prefix), identity)
            if found.kvs:
                header, kv = found.header, found.kvs[0]
            else:
                header, kv = await self._first_put(prefix, found.header.revision, identity)
            yield pb.LeaderResponse(header=header, kv=kv)
            watch = client.watch(rpc_pb2.WatchCreateRequest(
                key=kv.key, start_revision=header.revision + 1), identity)
            try:
                async for response in watch:
                    for event in response.events:
                        if event.type == kv_pb2.Event.DELETE:
                            break
                        yield pb.LeaderResponse(header=response.header, kv=event.kv)
                    else:
                        continue
                    break
            finally:
                await watch.aclose()

    async def _first_put(self, prefix: bytes, revision: int, identity: object
                         ) -> tuple[rpc_pb2.ResponseHeader, kv_pb2.KeyValue]:
        watch = self._client.watch(rpc_pb2.WatchCreateRequest(
            key=prefix, range_end=prefix_end(prefix), start_revision=revision), identity)
        try:
            async for response in watch:
                for event in response.events:
                    if event.type == kv_pb2.Event.PUT:
                        header = rpc_pb2.ResponseHeader()
                        header.CopyFrom(response.header)
                        header.revision = event.kv.mod_revision
                        return header, event.kv
        finally:
            await watch.aclose()
        raise errors.EtcdError("UNKNOWN", "lost watcher waiting for a leader")
