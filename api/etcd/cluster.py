"""etcd's Cluster.MemberList and Maintenance.Status for one node.

Members are the quorum's voters (the leader's DescribeQuorum; this node's configured voters
when no leader answers) and its observers as learners, each with its quorum listener as the
peer URL and its etcd address (``kraft.etcd.urls``) as the client URL. Status reports etcd's
version string ``ETCD_VERSION`` (etcdctl parses it), the leader's member id, the raft term (the
epoch), the raft index (the high watermark this node knows) and applied index, and the size of
this node's log directory as ``dbSize``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from api.etcd.context import ETCD_VERSION, EtcdContext
from kraft_spark.addresses import url_host
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.etcd.revision import member_number


def _directory_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


class ClusterServicer:
    def __init__(self, ctx: EtcdContext) -> None:
        self._ctx = ctx

    def _member(self, node_id: int, *, learner: bool,
                endpoints: dict[int, tuple[str, ...]]) -> rpc_pb2.Member:
        ctx = self._ctx
        member = rpc_pb2.Member(ID=member_number(ctx.node.cluster_id, node_id),
                                name=f"node-{node_id}", isLearner=learner)
        # The voter endpoints the leader reports (a voter added later too), else this node's
        # controller.quorum.voters.
        listed = [e.partition("://")[2] for e in endpoints.get(node_id, ())]
        voter = ctx.node.config.voters.get(node_id)
        # With the node's certificate every listener, the quorum's and etcd's, is TLS.
        scheme = "https" if ctx.node.config.tls is not None else "http"
        if listed:
            member.peerURLs.append(f"{scheme}://{listed[0]}")
        elif voter is not None:
            member.peerURLs.append(f"{scheme}://{url_host(voter[0])}:{voter[1]}")
        if node_id in ctx.urls:
            member.clientURLs.append(f"{scheme}://{ctx.urls[node_id]}")
        return member

    async def MemberList(self, _request: rpc_pb2.MemberListRequest, _context: Any,
                         _identity: object) -> rpc_pb2.MemberListResponse:
        ctx = self._ctx
        try:
            quorum = await ctx.backend.describe_quorum()
            voters = [v.replica_id for v in quorum.voters]
            observers = [o.replica_id for o in quorum.observers]
            endpoints = quorum.endpoints
        except Exception:
            # No leader to ask: the voters this node was configured with (static quorums).
            voters, observers, endpoints = sorted(ctx.node.config.voters), [], {}
        members = [self._member(i, learner=False, endpoints=endpoints) for i in sorted(voters)]
        members += [self._member(i, learner=True, endpoints=endpoints) for i in sorted(observers)
                    if i not in voters]
        return rpc_pb2.MemberListResponse(header=ctx.header(), members=members)

    async def Status(self, _request: rpc_pb2.StatusRequest, _context: Any,
                     _identity: object) -> rpc_pb2.StatusResponse:
        ctx = self._ctx
        state = ctx.node.describe()
        leader = state.get("leader_id")
        size = _directory_bytes(ctx.node.config.log_dir)
        response = rpc_pb2.StatusResponse(
            header=ctx.header(), version=ETCD_VERSION, dbSize=size, dbSizeInUse=size,
            raftTerm=int(state["epoch"]), raftIndex=int(state["high_watermark"]),
            raftAppliedIndex=int(state["applied_offset"]),
            isLearner=ctx.node.config.node_id not in ctx.node.config.voters)
        if leader is not None and leader >= 0:
            response.leader = member_number(ctx.node.cluster_id, int(leader))
        return response
