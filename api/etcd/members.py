"""etcd's Cluster membership changes as KIP-853 voter changes (AddRaftVoter, RemoveRaftVoter),
through the node's own quorum client (``NodeBackend.add_voter``/``remove_voter``), as the HTTP
API's ``/v1/quorum/voters`` does.

etcd's learners are the quorum's observers: nodes that fetch the log without voting
(``MemberList`` lists them with ``isLearner``). The order differs from etcd's: etcd adds a
member first and then starts it; KIP-853 adds a node only once it runs and fetches as an
observer with its directory id, caught up with the leader. So:

* ``MemberPromote(id)`` of an observer adds it as a voter (its directory id as it fetches, its
  listener as this node knows it: the voter endpoints the leader reports, else this node's
  ``controller.quorum.voters``). A voter: ``can only promote a learner member``; an observer
  that lags: ``... which is in sync with leader``; an unknown id: ``member not found``.
* ``MemberRemove(id)`` of a voter removes it; the node, still running, then fetches as an
  observer and lists as a learner until it is stopped. An observer cannot be removed (it is in
  no membership; stopping it is what removes it): FAILED_PRECONDITION saying so.
* ``MemberAdd(peerURLs, isLearner)``: the observer that listens on that URL (as known above)
  is added as a voter; with ``isLearner`` it already is a learner, and the answer says so. A
  URL of a voter: ``Peer URLs already exists``; no observer there: FAILED_PRECONDITION naming
  what to start first. An observer whose listener is not known here (started with
  ``controller.quorum.bootstrap.servers``, not in the voters list of this node) cannot be
  matched to a URL: the answer lists those observers' ids.
* ``MemberUpdate``: a voter's endpoint is what the voter itself reports when it starts
  (UpdateRaftVoter), so it answers OK when the URLs are the ones listed, and otherwise
  FAILED_PRECONDITION saying to restart the node on its new listener.
"""

from __future__ import annotations

import uuid
from typing import Any, Final
from urllib.parse import urlsplit

from api.etcd.cluster import ClusterServicer
from kraft_spark.client import ClientError
from kraft_spark.client.types import QuorumInfo, ReplicaInfo
from kraft_spark.client.voter_changes import VoterChangeError
from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.etcd.revision import member_number
from kraft_spark.protocol import ErrorCode
from kraft_spark.raft.voter_set import DEFAULT_LISTENER, NIL_DIRECTORY, Endpoint, parse_directory

# etcd's server waits this long for a membership change (its request timeout is 5 s, but a
# new voter must catch up first; AddRaftVoter's own default is 30 s).
CHANGE_TIMEOUT_S: Final = 30.0


def member_not_found() -> errors.EtcdError:
    return errors.EtcdError("NOT_FOUND", "etcdserver: member not found")


def not_learner() -> errors.EtcdError:
    return errors.EtcdError("FAILED_PRECONDITION", "etcdserver: can only promote a learner member")


def learner_not_ready(why: str) -> errors.EtcdError:
    return errors.EtcdError("FAILED_PRECONDITION", "etcdserver: can only promote a learner member "
                            f"which is in sync with leader ({why})")


def peer_urls_exist() -> errors.EtcdError:
    return errors.EtcdError("FAILED_PRECONDITION", "etcdserver: Peer URLs already exists")


def not_enough_started(why: str) -> errors.EtcdError:
    return errors.EtcdError("FAILED_PRECONDITION", "etcdserver: re-configuration failed due to "
                            f"not enough started members ({why})")


def _parse_peer_url(url: str) -> tuple[str, int]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        port = None
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        raise errors.EtcdError("INVALID_ARGUMENT",
                               f"etcdserver: given member URLs are invalid ({url!r}: expected "
                               "http[s]://host:port, the node's quorum listener)")
    return parts.hostname, port


def _change_error(exc: ClientError, *, adding: bool) -> errors.EtcdError:
    """A refused voter change as etcd's nearest error (Kafka's reason kept in it)."""
    if not isinstance(exc, VoterChangeError):
        return errors.EtcdError("UNAVAILABLE", f"etcdserver: {exc}")
    if exc.code == ErrorCode.VOTER_NOT_FOUND:
        return member_not_found()
    if exc.code == ErrorCode.DUPLICATE_VOTER:
        return not_learner() if adding else member_not_found()
    if exc.code == ErrorCode.REQUEST_TIMED_OUT and adding:
        return learner_not_ready(str(exc))
    return not_enough_started(str(exc))


class MembershipServicer(ClusterServicer):
    """MemberList (``ClusterServicer``) and the changes."""

    def _endpoint(self, quorum: QuorumInfo, node_id: int) -> Endpoint | None:
        """Where ``node_id``'s quorum listener is, as known here (None: not known)."""
        for text in quorum.endpoints.get(node_id, ()):
            name, _, where = text.partition("://")
            host, _, port = where.rpartition(":")
            if host and port.isdigit():
                return Endpoint(name or DEFAULT_LISTENER, host.strip("[]"), int(port))
        known = self._ctx.node.config.voters.get(node_id)
        return Endpoint(DEFAULT_LISTENER, *known) if known is not None else None

    async def _quorum(self) -> QuorumInfo:
        try:
            return await self._ctx.backend.describe_quorum()
        except ClientError as exc:
            raise errors.EtcdError("UNAVAILABLE", f"etcdserver: {exc}") from None

    def _node_of(self, quorum: QuorumInfo, member_id: int) -> int | None:
        ids = ({r.replica_id for r in (*quorum.voters, *quorum.observers)}
               | set(self._ctx.node.config.voters) | set(self._ctx.urls))
        cluster = self._ctx.node.cluster_id
        return next((i for i in sorted(ids) if member_number(cluster, i) == member_id), None)

    async def _members(self) -> tuple[rpc_pb2.Member, ...]:
        listed = await self.MemberList(rpc_pb2.MemberListRequest(), None, None)
        return tuple(listed.members)

    @staticmethod
    def _directory(replica: ReplicaInfo) -> uuid.UUID:
        return parse_directory(replica.directory_id) if replica.directory_id else NIL_DIRECTORY

    async def _add(self, quorum: QuorumInfo, observer: ReplicaInfo, where: Endpoint) -> None:
        if not observer.directory_id:
            raise learner_not_ready(f"node-{observer.replica_id} has not reported its directory "
                                    "id yet")
        try:
            await self._ctx.backend.add_voter(observer.replica_id, self._directory(observer),
                                              (where,), timeout_s=CHANGE_TIMEOUT_S)
        except ClientError as exc:
            raise _change_error(exc, adding=True) from None

    async def MemberPromote(self, request: rpc_pb2.MemberPromoteRequest, _context: Any,
                            _identity: object) -> rpc_pb2.MemberPromoteResponse:
        quorum = await self._quorum()
        node_id = self._node_of(quorum, request.ID)
        if node_id is None:
            raise member_not_found()
        if any(v.replica_id == node_id for v in quorum.voters):
            raise not_learner()
        observer = next((o for o in quorum.observers if o.replica_id == node_id), None)
        if observer is None:
            raise member_not_found()
        where = self._endpoint(quorum, node_id)
        if where is None:
            raise errors.EtcdError(
                "FAILED_PRECONDITION", f"kraft-spark: where node-{node_id}'s quorum listener is "
                "is not known here: add it with `member add <its listener as http://host:port>`")
        await self._add(quorum, observer, where)
        return rpc_pb2.MemberPromoteResponse(header=self._ctx.header(),
                                             members=await self._members())

    async def MemberRemove(self, request: rpc_pb2.MemberRemoveRequest, _context: Any,
                           _identity: object) -> rpc_pb2.MemberRemoveResponse:
        quorum = await self._quorum()
        node_id = self._node_of(quorum, request.ID)
        voter = next((v for v in quorum.voters if v.replica_id == node_id), None)
        if voter is None:
            if node_id is not None and any(o.replica_id == node_id for o in quorum.observers):
                raise errors.EtcdError(
                    "FAILED_PRECONDITION", f"kraft-spark: node-{node_id} is a learner (an "
                    "observer fetching the log), in no membership to remove it from: stop its "
                    "process")
            raise member_not_found()
        if len(quorum.voters) == 1:
            raise not_enough_started(f"node-{voter.replica_id} is the only voter")
        try:
            await self._ctx.backend.remove_voter(voter.replica_id, self._directory(voter),
                                                 timeout_s=CHANGE_TIMEOUT_S)
        except ClientError as exc:
            raise _change_error(exc, adding=False) from None
        return rpc_pb2.MemberRemoveResponse(header=self._ctx.header(),
                                            members=await self._members())

    async def MemberAdd(self, request: rpc_pb2.MemberAddRequest, _context: Any,
                        _identity: object) -> rpc_pb2.MemberAddResponse:
        if not request.peerURLs:
            raise errors.EtcdError("INVALID_ARGUMENT",
                                   "etcdserver: given member URLs are invalid (none given)")
        wanted = {_parse_peer_url(url) for url in request.peerURLs}
        quorum = await self._quorum()

        def listens_there(node_id: int) -> bool:
            where = self._endpoint(quorum, node_id)
            return where is not None and (where.host, where.port) in wanted

        if any(listens_there(v.replica_id) for v in quorum.voters):
            raise peer_urls_exist()
        observer = next((o for o in quorum.observers if listens_there(o.replica_id)), None)
        if observer is None:
            unknown = sorted(o.replica_id for o in quorum.observers
                             if self._endpoint(quorum, o.replica_id) is None)
            hint = (f"; observers whose listener is not known here: {unknown}" if unknown
                    else "")
            raise errors.EtcdError(
                "FAILED_PRECONDITION", f"kraft-spark: no observer of this quorum listens on "
                f"{', '.join(request.peerURLs)}: start that node first (`kraft-spark node` "
                "with this cluster's id, listening there, not a voter), let it fetch, then add "
                f"it{hint}")
        if not request.isLearner:
            where = self._endpoint(quorum, observer.replica_id)
            assert where is not None  # listens_there found it
            await self._add(quorum, observer, where)
        members = await self._members()
        mine = member_number(self._ctx.node.cluster_id, observer.replica_id)
        member = next((m for m in members if mine == m.ID), None)
        return rpc_pb2.MemberAddResponse(
            header=self._ctx.header(), members=members,
            member=member if member is not None else rpc_pb2.Member(
                ID=mine, peerURLs=request.peerURLs, isLearner=request.isLearner))

    async def MemberUpdate(self, request: rpc_pb2.MemberUpdateRequest, _context: Any,
                           _identity: object) -> rpc_pb2.MemberUpdateResponse:
        quorum = await self._quorum()
        node_id = self._node_of(quorum, request.ID)
        if node_id is None:
            raise member_not_found()
        where = self._endpoint(quorum, node_id)
        wanted = {_parse_peer_url(url) for url in request.peerURLs}
        if where is None or wanted != {(where.host, where.port)}:
            raise errors.EtcdError(
                "FAILED_PRECONDITION", f"kraft-spark: node-{node_id}'s peer URL is its quorum "
                "listener, which the node reports itself when it starts (KIP-853 "
                "UpdateRaftVoter): restart it listening on the new address instead")
        return rpc_pb2.MemberUpdateResponse(header=self._ctx.header(),
                                            members=await self._members())
