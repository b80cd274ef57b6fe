"""Who may call etcd's API: the node's HTTP credentials (``kraft_spark.http_auth``), so the two
APIs agree. A credential is an etcd user whose name is the credential's name (its scope when
unnamed) and whose password is its token: ``etcdctl --user admin:<admin token>`` calls
``Auth.Authenticate`` and then sends the token it got in the ``token`` metadata, as etcd's
clients do; a bearer ``authorization`` metadata with a token works too. Without credentials
(a loopback node started insecure) everything is allowed; with them, every call but
Authenticate needs a token, as the HTTP API refuses calls without one.

Scopes: reads (Range, Watch, TimeToLive, Leases, Status, MemberList, Election's Leader and
Observe) need ``read``, writes (Put, DeleteRange, Txn, Grant, Revoke, KeepAlive, Lock, Unlock,
Campaign, Proclaim, Resign) ``write``, membership changes and Snapshot, Hash, HashKV,
Defragment and MoveLeader ``admin`` (Alarm: ``read``). The token etcd's client gets from
Authenticate is the credential's token itself (phase 1: no separate session tokens, so none
expires; etcd's simple tokens are random and short-lived).
"""

from __future__ import annotations

from typing import Any, Final

from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import rpc_pb2
from kraft_spark.http_auth import Credentials, Identity, Scope, bearer_token

READ_METHODS: Final = frozenset({
    "etcdserverpb.KV/Range", "etcdserverpb.Watch/Watch", "etcdserverpb.Lease/LeaseTimeToLive",
    "etcdserverpb.Lease/LeaseLeases", "etcdserverpb.Maintenance/Status",
    "etcdserverpb.Cluster/MemberList", "v3electionpb.Election/Leader",
    "v3electionpb.Election/Observe", "etcdserverpb.Maintenance/Alarm"})
# etcd's root-only methods (its authMaintenanceServer and membership checks); the HTTP API's
# voter changes need ``admin`` too.
ADMIN_METHODS: Final = frozenset({
    *(f"etcdserverpb.Cluster/Member{m}" for m in ("Add", "Remove", "Update", "Promote")),
    *(f"etcdserverpb.Maintenance/{m}" for m in ("Snapshot", "Hash", "HashKV", "Defragment",
                                                "MoveLeader"))})
OPEN_METHODS: Final = frozenset({"etcdserverpb.Auth/Authenticate"})


class Authorizer:
    def __init__(self, credentials: Credentials | None) -> None:
        self._credentials = credentials

    def __call__(self, method: str, metadata: Any) -> Identity | None:
        """The caller's identity (None without credentials); EtcdError if refused."""
        credentials = self._credentials
        if credentials is None or method in OPEN_METHODS:
            return None
        token: bytes | None = None
        for key, value in metadata or ():
            raw = value.encode() if isinstance(value, str) else value
            if key == "token":
                token = raw
            elif key == "authorization" and token is None:
                token = bearer_token(raw) or raw
        if not token:
            raise errors.EtcdError("UNAUTHENTICATED", "etcdserver: user name is empty "
                                   "(kraft-spark needs credentials: etcdctl --user "
                                   "<name>:<token of DATA_DIR/http-credentials>)")
        identity = credentials.identify(token)
        if identity is None:
            raise errors.invalid_token()
        needed = (Scope.READ if method in READ_METHODS else
                  Scope.ADMIN if method in ADMIN_METHODS else Scope.WRITE)
        if identity.scope < needed:
            raise errors.permission_denied()
        return identity

    async def Authenticate(self, request: rpc_pb2.AuthenticateRequest, _context: Any,
                           _identity: object) -> rpc_pb2.AuthenticateResponse:
        if not request.name:
            raise errors.user_empty()
        credentials = self._credentials
        identity = (credentials.identify(request.password.encode())
                    if credentials is not None and request.password else None)
        if credentials is not None and (identity is None or identity.name != request.name):
            raise errors.auth_failed()
        return rpc_pb2.AuthenticateResponse(token=request.password)
