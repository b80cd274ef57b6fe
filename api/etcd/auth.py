"""Who may call etcd's API (``kraft_spark.auth_users``): the node's HTTP credentials, each a
built-in user named as the credential (its scope when unnamed) whose password is its token,
and the users added over etcd's Auth service (``api.etcd.auth_admin``), whose roles grant
READ, WRITE or READWRITE on keys, ranges and prefixes. ``etcdctl --user name:password`` calls
``Auth.Authenticate`` and then sends the token it got in the ``token`` metadata, as etcd's
clients do; a bearer ``authorization`` metadata with a token works too. Without credentials
(a loopback node started insecure) everything is allowed; with them, every call but
Authenticate needs a token, as the HTTP API refuses calls without one.

This checks the method; the keys a call touches are checked by its servicer
(``api.etcd.permissions``), as etcd's ``authApplierV3`` does:

* built-in users: reads (Range, Watch, TimeToLive, Leases, Status, Alarm, MemberList,
  Election's Leader and Observe, AuthStatus, UserGet, RoleGet) need scope ``read``; user and
  role management, membership changes and Snapshot, Hash, HashKV, Defragment, MoveLeader
  ``admin`` (etcd's root role; the HTTP API's voter changes need it too); everything else
  ``write``;
* added users: user and role management, membership changes, those maintenance calls and
  Compact need the root role (etcd lets any user compact; here it takes every node's
  history, so root only); everything else is judged on its keys.
"""

from __future__ import annotations

from typing import Any, Final

from kraft_spark.auth_users import Caller, Users
from kraft_spark.etcd import errors
from kraft_spark.http_auth import Scope, bearer_token

READ_METHODS: Final = frozenset({
    "etcdserverpb.KV/Range", "etcdserverpb.Watch/Watch", "etcdserverpb.Lease/LeaseTimeToLive",
    "etcdserverpb.Lease/LeaseLeases", "etcdserverpb.Maintenance/Status",
    "etcdserverpb.Cluster/MemberList", "v3electionpb.Election/Leader",
    "v3electionpb.Election/Observe", "etcdserverpb.Maintenance/Alarm",
    "etcdserverpb.Auth/AuthStatus",
    "etcdserverpb.Auth/UserGet", "etcdserverpb.Auth/RoleGet"})
OPEN_METHODS: Final = frozenset({"etcdserverpb.Auth/Authenticate"})
# etcd's needAdminPermission, its maintenance server's isPermitted and member changes.
ADMIN_METHODS: Final = frozenset(
    {f"etcdserverpb.Auth/{m}" for m in (
        "AuthEnable", "AuthDisable", "UserAdd", "UserList", "UserDelete", "UserChangePassword",
        "UserGrantRole", "UserRevokeRole", "RoleAdd", "RoleList", "RoleDelete",
        "RoleGrantPermission", "RoleRevokePermission")}
    | {f"etcdserverpb.Maintenance/{m}" for m in (
        "Defragment", "Hash", "HashKV", "Snapshot", "MoveLeader", "Downgrade")}
    | {f"etcdserverpb.Cluster/{m}" for m in (
        "MemberAdd", "MemberRemove", "MemberUpdate", "MemberPromote")})
COMPACT: Final = "etcdserverpb.KV/Compact"


class Authorizer:
    def __init__(self, users: Users | None) -> None:
        self._users = users

    def __call__(self, method: str, metadata: Any) -> Caller | None:
        """The caller (None without credentials); EtcdError if refused."""
        users = self._users
        if users is None or method in OPEN_METHODS:
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
                                   "<name>:<token of DATA_DIR/http-credentials> or "
                                   "<user>:<password> of a user added with etcdctl user add)")
        caller = users.from_token(token)
        if caller is None:
            raise errors.invalid_token()
        if caller.builtin:
            if method in ADMIN_METHODS:
                needed = Scope.ADMIN
            else:
                needed = Scope.READ if method in READ_METHODS else Scope.WRITE
            if caller.scope < needed:
                raise errors.permission_denied()
        elif (method in ADMIN_METHODS or method == COMPACT) and not caller.is_root:
            raise errors.permission_denied()
        return caller
