"""etcd's Auth service: users, roles and their permissions (``kraft_spark.store.auth``, applied
by every replica from ``kraft.auth.op`` records), plus the credentials file's built-in users
(``kraft_spark.auth_users``). Who may call which method is ``api.etcd.auth``'s; the replies
and errors are etcd's (``server/auth/store.go``, ``api/v3rpc/rpctypes``).

kraft-spark always requires credentials when it has them, so AuthEnable answers OK and
AuthDisable is refused. Built-in users and roles are the credentials file's: they cannot be
deleted, given other roles or a new password here (edit the file), and the built-in roles
(root, writer, reader) cannot be deleted or changed.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from api.etcd.context import EtcdContext
from kraft_spark.auth_users import BUILTIN_ROLE_OF, Caller, Users
from kraft_spark.client.types import NewRecord
from kraft_spark.etcd import errors
from kraft_spark.etcd.pb import auth_pb2, rpc_pb2
from kraft_spark.store.auth import (
    AUTH_OP_HEADER,
    BUILTIN_ROLES,
    PERMISSION_TYPES,
    REASON_CODES,
    ROLE_NOT_FOUND,
    USER_EXISTS,
    USER_NOT_FOUND,
    AuthTable,
    encode_op,
    hash_password,
)

CREDENTIALS_HINT: Final = ("is a user of the node's credentials file (<data-dir>/http-credentials,"
                           " kraft.http.credentials.file): change it there, not over etcd's "
                           "Auth API")


def reason_error(reason: str) -> errors.EtcdError:
    """The etcd error of a failed auth operation's reason."""
    code = REASON_CODES.get(reason, "FAILED_PRECONDITION")
    return errors.EtcdError(code, f"etcdserver: {reason}")


def builtin_user_error(name: str) -> errors.EtcdError:
    return errors.EtcdError("INVALID_ARGUMENT",
                            f"etcdserver: invalid auth management: {name!r} {CREDENTIALS_HINT}")


def role_empty() -> errors.EtcdError:
    return errors.EtcdError("INVALID_ARGUMENT", "etcdserver: role name is empty")


class AuthServicer:
    def __init__(self, ctx: EtcdContext, users: Users | None) -> None:
        self._ctx = ctx
        self._users = users

    def _table(self) -> AuthTable:
        return self._ctx.store.applied_state().auth

    async def _fresh_table(self) -> AuthTable:
        """The auth table after the read index: every change acknowledged before this call
        began is in it (etcd answers these through raft), on a lagging node too."""
        await self._ctx.read_view(serializable=False)
        return self._table()

    def _builtin(self) -> dict[str, Any]:
        return self._users.builtin_names() if self._users is not None else {}

    async def _apply(self, op: str, name: str, **fields: Any) -> None:
        """Append one auth operation and wait until this node applied it."""
        record = NewRecord(None, None, ((AUTH_OP_HEADER, encode_op(op, name, **fields)),))
        _, reason = await self._ctx.append([record])
        if reason:
            raise reason_error(reason)

    def _header(self) -> rpc_pb2.ResponseHeader:
        return self._ctx.header()

    # ------------------------------------------------------------------ auth itself

    async def AuthEnable(self, _request: Any, _context: Any, _caller: object
                         ) -> rpc_pb2.AuthEnableResponse:
        return rpc_pb2.AuthEnableResponse(header=self._header())  # always on

    async def AuthDisable(self, _request: Any, _context: Any, _caller: object) -> Any:
        raise errors.EtcdError(
            "FAILED_PRECONDITION", "etcdserver: authentication cannot be disabled: kraft-spark "
            "always requires credentials (a node started with kraft.http.insecure=true on "
            "loopback takes every call without them)")

    async def AuthStatus(self, _request: Any, _context: Any, _caller: object
                         ) -> rpc_pb2.AuthStatusResponse:
        table = await self._fresh_table()
        return rpc_pb2.AuthStatusResponse(header=self._header(),
                                          enabled=self._users is not None,
                                          authRevision=table.revision)

    async def Authenticate(self, request: rpc_pb2.AuthenticateRequest, _context: Any,
                           _caller: object) -> rpc_pb2.AuthenticateResponse:
        if not request.name:
            raise errors.user_empty()
        users = self._users
        if users is None:  # nothing to check against: every call is allowed anyway
            return rpc_pb2.AuthenticateResponse(header=self._header(), token=request.password)
        if users.builtin_scope(request.name) is None:
            await self._fresh_table()  # a user added through another node just now
        found = await users.authenticate(request.name, request.password.encode())
        if found is None:
            raise errors.auth_failed()
        return rpc_pb2.AuthenticateResponse(header=self._header(), token=found[0].decode())

    # ------------------------------------------------------------------ users

    async def UserAdd(self, request: rpc_pb2.AuthUserAddRequest, _context: Any,
                      _caller: object) -> rpc_pb2.AuthUserAddResponse:
        if not request.name:
            raise errors.user_empty()
        if request.name in self._builtin() or request.name in (await self._fresh_table()).users:
            raise reason_error(USER_EXISTS)
        if request.hashedPassword:
            raise errors.EtcdError("INVALID_ARGUMENT", "etcdserver: kraft-spark stores scrypt "
                                   "hashes and cannot take a bcrypt hashedPassword: send the "
                                   "password")
        password = None
        if not request.options.no_password:
            password = (await asyncio.to_thread(hash_password,
                                                request.password.encode())).to_json()
        await self._apply("user_add", request.name, password=password)
        return rpc_pb2.AuthUserAddResponse(header=self._header())

    async def UserGet(self, request: rpc_pb2.AuthUserGetRequest, _context: Any,
                      caller: object) -> rpc_pb2.AuthUserGetResponse:
        _admin_or(caller, isinstance(caller, Caller) and caller.name == request.name)
        scope = self._builtin().get(request.name)
        if scope is not None:
            return rpc_pb2.AuthUserGetResponse(header=self._header(),
                                               roles=[BUILTIN_ROLE_OF[scope]])
        user = (await self._fresh_table()).users.get(request.name)
        if user is None:
            raise reason_error(USER_NOT_FOUND)
        return rpc_pb2.AuthUserGetResponse(header=self._header(), roles=list(user.roles))

    async def UserList(self, _request: Any, _context: Any, _caller: object
                       ) -> rpc_pb2.AuthUserListResponse:
        names = set(self._builtin()) | set((await self._fresh_table()).users)
        return rpc_pb2.AuthUserListResponse(header=self._header(), users=sorted(names))

    async def UserDelete(self, request: rpc_pb2.AuthUserDeleteRequest, _context: Any,
                         _caller: object) -> rpc_pb2.AuthUserDeleteResponse:
        self._not_builtin(request.name)
        await self._apply("user_delete", request.name)
        return rpc_pb2.AuthUserDeleteResponse(header=self._header())

    async def UserChangePassword(self, request: rpc_pb2.AuthUserChangePasswordRequest,
                                 _context: Any, _caller: object
                                 ) -> rpc_pb2.AuthUserChangePasswordResponse:
        self._not_builtin(request.name)
        if request.hashedPassword:
            raise errors.EtcdError("INVALID_ARGUMENT", "etcdserver: kraft-spark cannot take a "
                                   "bcrypt hashedPassword: send the password")
        if request.name not in (await self._fresh_table()).users:
            raise reason_error(USER_NOT_FOUND)
        password = await asyncio.to_thread(hash_password, request.password.encode())
        await self._apply("user_password", request.name, password=password.to_json())
        return rpc_pb2.AuthUserChangePasswordResponse(header=self._header())

    async def UserGrantRole(self, request: rpc_pb2.AuthUserGrantRoleRequest, _context: Any,
                            _caller: object) -> rpc_pb2.AuthUserGrantRoleResponse:
        self._not_builtin(request.user)
        await self._apply("user_grant", request.user, role=request.role)
        return rpc_pb2.AuthUserGrantRoleResponse(header=self._header())

    async def UserRevokeRole(self, request: rpc_pb2.AuthUserRevokeRoleRequest, _context: Any,
                             _caller: object) -> rpc_pb2.AuthUserRevokeRoleResponse:
        self._not_builtin(request.name)
        await self._apply("user_revoke", request.name, role=request.role)
        return rpc_pb2.AuthUserRevokeRoleResponse(header=self._header())

    def _not_builtin(self, name: str) -> None:
        if not name:
            raise errors.user_empty()
        if name in self._builtin():
            raise builtin_user_error(name)

    # ------------------------------------------------------------------ roles

    async def RoleAdd(self, request: rpc_pb2.AuthRoleAddRequest, _context: Any,
                      _caller: object) -> rpc_pb2.AuthRoleAddResponse:
        if not request.name:
            raise role_empty()
        await self._apply("role_add", request.name)
        return rpc_pb2.AuthRoleAddResponse(header=self._header())

    async def RoleGet(self, request: rpc_pb2.AuthRoleGetRequest, _context: Any,
                      caller: object) -> rpc_pb2.AuthRoleGetResponse:
        _admin_or(caller, isinstance(caller, Caller) and request.role in caller.roles)
        perms = (await self._fresh_table()).role(request.role)
        if perms is None:
            raise reason_error(ROLE_NOT_FOUND)
        return rpc_pb2.AuthRoleGetResponse(header=self._header(), perm=[
            auth_pb2.Permission(permType=p.kind, key=p.key,
                                range_end=p.range_end) for p in perms])

    async def RoleList(self, _request: Any, _context: Any, _caller: object
                       ) -> rpc_pb2.AuthRoleListResponse:
        names = set(BUILTIN_ROLES) | set((await self._fresh_table()).roles)
        return rpc_pb2.AuthRoleListResponse(header=self._header(), roles=sorted(names))

    async def RoleDelete(self, request: rpc_pb2.AuthRoleDeleteRequest, _context: Any,
                         _caller: object) -> rpc_pb2.AuthRoleDeleteResponse:
        if not request.role:
            raise role_empty()
        await self._apply("role_delete", request.role)
        return rpc_pb2.AuthRoleDeleteResponse(header=self._header())

    async def RoleGrantPermission(self, request: rpc_pb2.AuthRoleGrantPermissionRequest,
                                  _context: Any, _caller: object
                                  ) -> rpc_pb2.AuthRoleGrantPermissionResponse:
        if not request.HasField("perm"):
            raise errors.EtcdError("INVALID_ARGUMENT", "etcdserver: permission not given")
        if not request.name:
            raise role_empty()
        perm = request.perm
        kind = PERMISSION_TYPES[perm.permType] if 0 <= perm.permType < 3 else ""
        if not kind:
            raise errors.EtcdError("INVALID_ARGUMENT", "etcdserver: invalid permission type")
        await self._apply("role_grant", request.name, key=perm.key, end=perm.range_end,
                          type=kind)
        return rpc_pb2.AuthRoleGrantPermissionResponse(header=self._header())

    async def RoleRevokePermission(self, request: rpc_pb2.AuthRoleRevokePermissionRequest,
                                   _context: Any, _caller: object
                                   ) -> rpc_pb2.AuthRoleRevokePermissionResponse:
        if not request.role:
            raise role_empty()
        await self._apply("role_revoke", request.role, key=request.key, end=request.range_end)
        return rpc_pb2.AuthRoleRevokePermissionResponse(header=self._header())


def _admin_or(caller: object, allowed: bool) -> None:
    """etcd's UserGet / RoleGet rule: root, or the caller's own user or role."""
    if caller is None or allowed:
        return
    if isinstance(caller, Caller) and caller.is_root:
        return
    raise errors.permission_denied()


__all__ = ["AuthServicer", "reason_error"]
