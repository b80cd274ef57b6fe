"""etcd's users and roles (its RBAC: ``server/auth/store.go``) as replicated store state.

Every change is one keyless, valueless record carrying the ``kraft.auth.op`` header, a JSON
object naming the operation (``op``) and its fields; every replica's state machine
(``kraft_spark.state.machine``) applies it to its ``AuthTable`` at its offset, so every node,
and every replay from the log or from a snapshot, holds the same users and roles. An operation
that cannot apply (a user that already exists, a role not found...) changes nothing and is
remembered as the record's failure, whose reason is etcd's error text without its
``etcdserver:`` prefix (``REASON_CODES`` gives its gRPC code).

Operations (keys and range ends in base64):

* ``user_add`` ``name``, ``password`` (``{"salt", "hash", "n", "r", "p"}``: scrypt, computed by
  the node that took the request; null: etcd's ``--no-password`` user);
* ``user_delete`` ``name``; ``user_password`` ``name``, ``password``;
* ``user_grant`` / ``user_revoke`` ``name``, ``role``;
* ``role_add`` / ``role_delete`` ``name``;
* ``role_grant`` ``name``, ``key``, ``end``, ``type`` (READ, WRITE, READWRITE);
  ``role_revoke`` ``name``, ``key``, ``end``.

Built-in roles (``BUILTIN_ROLES``): ``root`` (etcd's: everything, user and role management
included), ``writer`` (read and write every key) and ``reader`` (read every key), the roles of
the credentials file's scopes (admin, write, read). They exist without being added, can be
granted to users, and can be neither added, deleted nor changed. The credentials file's users
are not here: they are the node's configuration (``api.etcd.auth``), not replicated state.

Passwords are stored hashed (scrypt with a per-user random salt), never in plain; the hash is
in the log and in snapshots (as etcd's bcrypt hashes are in its backend).

Pure and deterministic: no clock, no randomness (the salt comes in the record).
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import hmac
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

AUTH_OP_HEADER: Final = "kraft.auth.op"
ROOT_ROLE: Final = "root"
READ: Final = "READ"
WRITE: Final = "WRITE"
READWRITE: Final = "READWRITE"
PERMISSION_TYPES: Final = (READ, WRITE, READWRITE)  # etcd's authpb.Permission_Type order

# etcd's reasons (rpctypes' messages without "etcdserver: ") -> their gRPC codes.
USER_EXISTS: Final = "user name already exists"
USER_NOT_FOUND: Final = "user name not found"
ROLE_EXISTS: Final = "role name already exists"
ROLE_NOT_FOUND: Final = "role name not found"
ROLE_NOT_GRANTED: Final = "role is not granted to the user"
PERMISSION_NOT_GRANTED: Final = "permission is not granted to the role"
INVALID_MGMT: Final = "invalid auth management"
REASON_CODES: Final = {USER_EXISTS: "FAILED_PRECONDITION", USER_NOT_FOUND: "FAILED_PRECONDITION",
                       ROLE_EXISTS: "FAILED_PRECONDITION", ROLE_NOT_FOUND: "FAILED_PRECONDITION",
                       ROLE_NOT_GRANTED: "FAILED_PRECONDITION",
                       PERMISSION_NOT_GRANTED: "FAILED_PRECONDITION",
                       INVALID_MGMT: "INVALID_ARGUMENT"}

# scrypt's cost (RFC 7914's interactive setting: 16 MiB, some tens of ms); stored with each
# hash, so a later change of these leaves existing passwords verifiable.
SCRYPT_N: Final = 1 << 14
SCRYPT_R: Final = 8
SCRYPT_P: Final = 1
SALT_BYTES: Final = 16


@dataclass(frozen=True, slots=True)
class Password:
    """A scrypt hash of a password with its salt and parameters."""

    salt: bytes = field(repr=False)
    digest: bytes = field(repr=False)
    n: int = SCRYPT_N
    r: int = SCRYPT_R
    p: int = SCRYPT_P

    def matches(self, password: bytes) -> bool:
        """Whether ``password`` is this one (constant-time comparison of the hashes)."""
        computed = hashlib.scrypt(password, salt=self.salt, n=self.n, r=self.r, p=self.p,
                                  maxmem=256 * self.n * self.r + (1 << 20),
                                  dklen=len(self.digest))
        return hmac.compare_digest(computed, self.digest)

    def to_json(self) -> dict[str, Any]:
        return {"salt": _b64(self.salt), "hash": _b64(self.digest), "n": self.n, "r": self.r,
                "p": self.p}

    @classmethod
    def from_json(cls, data: Any) -> Password:
        if not isinstance(data, dict):
            raise ValueError("a password is an object {salt, hash, n, r, p}")
        n, r, p = (int(data.get(k, d)) for k, d in (("n", SCRYPT_N), ("r", SCRYPT_R),
                                                      ("p", SCRYPT_P)))
        if n < 2 or n & (n - 1) or not 0 < r <= 64 or not 0 < p <= 16 or n > 1 << 20:
            raise ValueError(f"scrypt parameters out of range: n={n} r={r} p={p}")
        salt, digest = _unb64(data.get("salt")), _unb64(data.get("hash"))
        if not salt or len(digest) < 16:
            raise ValueError("a password needs a salt and a hash of 16 bytes or more")
        return cls(salt, digest, n, r, p)


def hash_password(password: bytes) -> Password:
    """A new hash of ``password`` with a random salt (the node taking the request does this;
    the record carries the result, so applying it stays deterministic)."""
    salt = os.urandom(SALT_BYTES)
    digest = hashlib.scrypt(password, salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                            maxmem=256 * SCRYPT_N * SCRYPT_R + (1 << 20), dklen=32)
    return Password(salt, digest)


@dataclass(frozen=True, slots=True)
class Permission:
    """etcd's ``authpb.Permission``: ``range_end`` empty: the key alone; ``b"\\0"``: every key
    from ``key`` on; otherwise ``[key, range_end)``."""

    kind: str
    key: bytes
    range_end: bytes = b""

    def interval(self) -> tuple[bytes, bytes | None]:
        """[start, end) with None for no end."""
        if not self.range_end:
            return self.key, self.key + b"\0"
        if self.range_end == b"\0":
            return self.key, None
        return self.key, self.range_end


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password: Password | None
    roles: tuple[str, ...] = ()  # sorted, as etcd keeps them


EVERY_KEY: Final = (Permission(READWRITE, b"", b"\0"),)
BUILTIN_ROLES: Final[dict[str, tuple[Permission, ...]]] = {
    ROOT_ROLE: EVERY_KEY,  # etcd's rootPerm, what RoleGet answers for root
    "writer": EVERY_KEY,
    "reader": (Permission(READ, b"", b"\0"),),
}


def valid_range(key: bytes, range_end: bytes) -> bool:
    """etcd's ``isValidPermissionRange``: a key, and an end above it, empty or ``\\0``."""
    return bool(key) and (not range_end or range_end == b"\0" or key < range_end)


class Permissions:
    """What one user may do: root, or the union of its roles' intervals for reading and for
    writing (etcd's ``unifiedRangePermissions``), merged so a check is one binary search."""

    __slots__ = ("_read", "_write", "root")

    def __init__(self, perms: Iterable[Permission], root: bool = False) -> None:
        self.root = root
        reads, writes = [], []
        for perm in perms:
            if perm.kind in (READ, READWRITE):
                reads.append(perm.interval())
            if perm.kind in (WRITE, READWRITE):
                writes.append(perm.interval())
        self._read, self._write = _merged(reads), _merged(writes)

    def allows(self, key: bytes, range_end: bytes, *, write: bool) -> bool:
        """Whether the request's key (``range_end`` empty), range or from-key (``\\0``) is
        covered, as etcd's ``isRangeOpPermitted``."""
        if self.root:
            return True
        merged = self._write if write else self._read
        if not range_end:
            start, end = key, key + b"\0"
        elif range_end == b"\0":
            start, end = key, None
        elif range_end <= key:  # an empty range: only its key is named
            start, end = key, key + b"\0"
        else:
            start, end = key, range_end
        starts = [s for s, _ in merged]
        index = bisect.bisect_right(starts, start) - 1
        if index < 0:
            return False
        covered_end = merged[index][1]
        return covered_end is None or (end is not None and end <= covered_end)


def _merged(intervals: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """The union of ``intervals`` as disjoint sorted ones (touching ones joined)."""
    out: list[tuple[bytes, bytes | None]] = []
    for start, end in sorted(intervals, key=lambda i: i[0]):
        if out:
            last_start, last_end = out[-1]
            if last_end is None:
                break
            if start <= last_end:
                out[-1] = (last_start, None if end is None else max(last_end, end))
                continue
        out.append((start, end))
    return out


ALL_PERMISSIONS: Final = Permissions((), root=True)
NO_PERMISSIONS: Final = Permissions(())


class AuthTable:
    """The users and roles added over etcd's Auth API. Not thread-safe (the state's owner)."""

    __slots__ = ("_cache", "revision", "roles", "users")

    def __init__(self) -> None:
        self.users: dict[str, User] = {}
        self.roles: dict[str, tuple[Permission, ...]] = {}
        # etcd's auth revision: how many changes applied (AuthStatus answers it).
        self.revision = 0
        self._cache: dict[str, Permissions] = {}  # derived, rebuilt after every change

    def permissions(self, name: str) -> Permissions:
        """The merged permissions of user ``name`` (none when it does not exist)."""
        found = self._cache.get(name)
        if found is None:
            user = self.users.get(name)
            found = NO_PERMISSIONS if user is None else permissions_of(user.roles, self.roles)
            self._cache[name] = found
        return found

    def role(self, name: str) -> tuple[Permission, ...] | None:
        """A role's permissions (built-in ones included), None if it does not exist."""
        builtin = BUILTIN_ROLES.get(name)
        return builtin if builtin is not None else self.roles.get(name)

    def apply(self, raw: bytes | None) -> str:
        """Apply one ``kraft.auth.op`` value; the reason it failed (nothing changed), or ""."""
        try:
            op = json.loads(raw or b"")
            if not isinstance(op, dict):
                raise ValueError("an auth operation is a JSON object")
            reason = self._apply(op)
        except (ValueError, TypeError, KeyError) as exc:
            return f"malformed {AUTH_OP_HEADER}: {exc}"
        except RecursionError:  # JSON nested past the interpreter's depth: fail the record
            return f"malformed {AUTH_OP_HEADER}: nested too deeply"
        if not reason:
            self.revision += 1
            self._cache.clear()
        return reason

    def _apply(self, op: dict[str, Any]) -> str:
        kind, name = op["op"], op["name"]
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty string")
        users, roles = self.users, self.roles
        if kind == "user_add":
            if name in users:
                return USER_EXISTS
            raw_password = op.get("password")
            password = None if raw_password is None else Password.from_json(raw_password)
            users[name] = User(name, password)
        elif kind in ("user_delete", "user_password", "user_grant", "user_revoke"):
            user = users.get(name)
            if user is None:
                return USER_NOT_FOUND
            if kind == "user_delete":
                del users[name]
            elif kind == "user_password":
                password = None if user.password is None else Password.from_json(
                    op["password"])
                users[name] = User(name, password, user.roles)
            else:
                role = op["role"]
                if not isinstance(role, str):
                    raise ValueError("role must be a string")
                if kind == "user_grant":
                    if self.role(role) is None:
                        return ROLE_NOT_FOUND
                    users[name] = User(name, user.password,
                                       tuple(sorted(set(user.roles) | {role})))
                elif role not in user.roles:
                    return ROLE_NOT_GRANTED
                else:
                    users[name] = User(name, user.password,
                                       tuple(r for r in user.roles if r != role))
        elif name in BUILTIN_ROLES:
            return ROLE_EXISTS if kind == "role_add" else INVALID_MGMT
        elif kind == "role_add":
            if name in roles:
                return ROLE_EXISTS
            roles[name] = ()
        elif kind not in ("role_delete", "role_grant", "role_revoke"):
            raise ValueError(f"unknown operation {kind!r}")
        elif name not in roles:
            return ROLE_NOT_FOUND
        elif kind == "role_delete":
            del roles[name]
            for user in list(users.values()):  # etcd takes it from every user too
                if name in user.roles:
                    users[user.name] = User(user.name, user.password,
                                            tuple(r for r in user.roles if r != name))
        else:
            key, end = _unb64(op["key"]), _unb64(op.get("end", ""))
            rest = [p for p in roles[name] if (p.key, p.range_end) != (key, end)]
            if kind == "role_revoke":
                if len(rest) == len(roles[name]):
                    return PERMISSION_NOT_GRANTED
            else:
                if op["type"] not in PERMISSION_TYPES:
                    raise ValueError(f"unknown permission type {op['type']!r}")
                if not valid_range(key, end):
                    return INVALID_MGMT
                rest.append(Permission(op["type"], key, end))  # replaces one of the same range
            roles[name] = tuple(sorted(rest, key=lambda p: (p.key, p.range_end)))
        return ""

    # ------------------------------------------------------------------ snapshots

    def export(self) -> dict[str, Any]:
        """What a snapshot stores (empty when nothing was ever added)."""
        if not self.revision:
            return {}
        return {
            "revision": self.revision,
            "users": [[u.name, None if u.password is None else u.password.to_json(),
                       list(u.roles)] for _, u in sorted(self.users.items())],
            "roles": [[name, [[p.kind, _b64(p.key), _b64(p.range_end)] for p in perms]]
                      for name, perms in sorted(self.roles.items())],
        }

    def load(self, data: dict[str, Any]) -> None:
        """Replace everything with a snapshot's ``export``. Raises ValueError if malformed."""
        try:
            users = {str(n): User(str(n), None if pw is None else Password.from_json(pw),
                                  tuple(str(r) for r in roles))
                     for n, pw, roles in data.get("users", [])}
            roles_ = {str(n): tuple(Permission(str(k), _unb64(key), _unb64(end))
                                    for k, key, end in perms)
                      for n, perms in data.get("roles", [])}
            revision = int(data.get("revision", 0))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed auth table: {exc}") from None
        self.users, self.roles, self.revision = users, roles_, revision
        self._cache.clear()


def permissions_of(role_names: Iterable[str], roles: dict[str, tuple[Permission, ...]]
                   ) -> Permissions:
    """The union of the named roles' permissions (root: everything)."""
    names = tuple(role_names)
    if ROOT_ROLE in names:
        return ALL_PERMISSIONS
    perms: list[Permission] = []
    for name in names:
        perms.extend(BUILTIN_ROLES.get(name) or roles.get(name, ()))
    return Permissions(perms)


def encode_op(op: str, name: str, **fields: Any) -> bytes:
    """A ``kraft.auth.op`` value; bytes fields (key, end) go as base64."""
    body: dict[str, Any] = {"op": op, "name": name}
    for k, v in fields.items():
        body[k] = _b64(v) if isinstance(v, bytes) else v
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ValueError("expected a base64 string")
    return base64.b64decode(text.encode("ascii"), validate=True)


__all__ = ["AUTH_OP_HEADER", "BUILTIN_ROLES", "PERMISSION_TYPES", "REASON_CODES", "ROOT_ROLE",
           "AuthTable", "Password", "Permission", "Permissions", "User", "encode_op",
           "hash_password", "permissions_of", "valid_range"]
