"""Who calls, for etcd's gRPC API and the HTTP API alike: the credentials file's users
(``kraft_spark.http_auth``) and the users added over etcd's Auth service
(``kraft_spark.store.auth``, replicated), so both APIs agree on who may read or write a key.

* A credential is a built-in user named as the credential (its scope when unnamed), whose
  password is its token and whose role is its scope's (``BUILTIN_ROLE_OF``: admin is etcd's
  ``root``). Its token is accepted as it is; Authenticate returns it.
* An added user authenticates with its password (scrypt hash in the auth table) and gets a
  session token, ``kst1.<name>.<nonce>.<mac>``: an HMAC-SHA256, under a key derived from the
  credentials file's tokens (the same on every node sharing the file), of the name, the nonce
  and the user's current password hash. Any node checks it against its replicated auth table
  without shared session state; changing the password or deleting the user voids every token
  it had. (etcd's simple tokens live in each member's memory and expire after 5 idle minutes;
  these live as long as the password.)

A name given by a credential shadows an added user of the same name (adding one is refused).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from kraft_spark.http_auth import Credentials, Identity, Scope
from kraft_spark.store.auth import (
    ALL_PERMISSIONS,
    ROOT_ROLE,
    AuthTable,
    Permissions,
    User,
)

BUILTIN_ROLE_OF: Final = {Scope.ADMIN: ROOT_ROLE, Scope.WRITE: "writer", Scope.READ: "reader"}
TOKEN_PREFIX: Final = b"kst1."
NONCE_BYTES: Final = 16
# Successful password checks remembered (HTTP Basic sends the password on every request;
# scrypt costs tens of ms): keyed by the user, its password hash and a digest of the password.
VERIFIED_CACHE: Final = 256


@dataclass(frozen=True)
class Caller(Identity):
    """An authenticated caller: ``scope`` is its credential's (an added user: admin with the
    root role, else write, for the lease API's ownership rule), ``builtin`` whether it is a
    credential, ``permissions`` an added user's merged roles."""

    builtin: bool = True
    roles: tuple[str, ...] = ()
    permissions: Permissions = field(default=ALL_PERMISSIONS, compare=False, repr=False)
    # An added user's password hash its token or password was checked against: a later look
    # at a fresher table that finds another one (changed since) must refuse the call.
    password_digest: bytes = field(default=b"", compare=False, repr=False)

    @property
    def is_root(self) -> bool:
        return self.scope >= Scope.ADMIN

    def allows(self, key: bytes, range_end: bytes, *, write: bool) -> bool:
        """Whether this caller may read (or write) ``key`` / ``[key, range_end)``."""
        if self.builtin:
            return self.scope >= (Scope.WRITE if write else Scope.READ)
        return self.permissions.allows(key, range_end, write=write)


def added_caller(user: User, table: AuthTable) -> Caller:
    root = ROOT_ROLE in user.roles
    return Caller(user.name, Scope.ADMIN if root else Scope.WRITE, builtin=False,
                  roles=user.roles, permissions=table.permissions(user.name),
                  password_digest=user.password.digest if user.password is not None else b"")


def still_valid(caller: Caller, table: AuthTable) -> Caller | None:
    """An added user as ``table`` has it now, if its password is still the one its token or
    password was checked against; None otherwise (deleted, or a new password since)."""
    user = table.users.get(caller.name)
    if user is None or user.password is None or user.password.digest != caller.password_digest:
        return None
    return added_caller(user, table)


class Users:
    """Both kinds of user of one node: ``credentials`` and the auth table of its applied state
    (``table``: read on the event loop that applies it)."""

    def __init__(self, credentials: Credentials, table: Callable[[], AuthTable | None]) -> None:
        self.credentials = credentials
        self._table = table
        material = b"\0".join(sorted(e.token.encode() for e in credentials.entries))
        self._key = hashlib.sha256(b"kraft-spark etcd session tokens\0" + material).digest()
        self._builtin = {e.name or e.scope.label: e.scope for e in credentials.entries}
        self._verified: OrderedDict[tuple[str, bytes, bytes], None] = OrderedDict()

    def builtin_scope(self, name: str) -> Scope | None:
        """The scope of the credential named ``name`` (None: not a built-in user)."""
        return self._builtin.get(name)

    def builtin_names(self) -> dict[str, Scope]:
        return dict(self._builtin)

    def table(self) -> AuthTable:
        return self._table() or AuthTable()

    def from_token(self, token: bytes) -> Caller | None:
        """The caller a token belongs to: a credential's token or a session token."""
        identity = self.credentials.identify(token)
        if identity is not None:
            return Caller(identity.name, identity.scope,
                          roles=(BUILTIN_ROLE_OF[identity.scope],))
        if not token.startswith(TOKEN_PREFIX):
            return None
        try:
            raw_name, nonce, mac = (base64.urlsafe_b64decode(part + b"=" * (-len(part) % 4))
                                    for part in token[len(TOKEN_PREFIX):].split(b"."))
            name = raw_name.decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        table = self.table()
        user = table.users.get(name)
        if user is None or user.password is None or name in self._builtin:
            return None
        if not hmac.compare_digest(self._mac(user, nonce), mac):
            return None
        return added_caller(user, table)

    async def authenticate(self, name: str, password: bytes) -> tuple[bytes, Caller] | None:
        """etcd's Authenticate: the token to send and who it is, or None (wrong name or
        password). A credential's token is its own; an added user gets a session token."""
        scope = self._builtin.get(name)
        if scope is not None:
            identity = self.credentials.identify(password)
            if identity is None or identity.name != name:
                return None
            return password, Caller(name, scope, roles=(BUILTIN_ROLE_OF[scope],))
        table = self.table()
        user = table.users.get(name)
        if user is None or user.password is None:
            return None
        stored = user.password
        remembered = (name, stored.digest, hashlib.sha256(password).digest())
        if remembered not in self._verified:
            if not await asyncio.to_thread(stored.matches, password):
                return None
            self._verified[remembered] = None
            if len(self._verified) > VERIFIED_CACHE:
                self._verified.popitem(last=False)
        nonce = os.urandom(NONCE_BYTES)
        token = TOKEN_PREFIX + b".".join(
            base64.urlsafe_b64encode(part).rstrip(b"=")
            for part in (name.encode(), nonce, self._mac(user, nonce)))
        return token, added_caller(user, table)

    def _mac(self, user: User, nonce: bytes) -> bytes:
        assert user.password is not None  # checked by the callers
        message = b"\0".join((user.name.encode(), nonce, user.password.salt,
                              user.password.digest))
        return hmac.new(self._key, message, hashlib.sha256).digest()


__all__ = ["BUILTIN_ROLE_OF", "TOKEN_PREFIX", "Caller", "Users", "added_caller", "still_valid"]
