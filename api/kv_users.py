"""etcd's users on the HTTP API (``kraft_spark.auth_users``), so both APIs agree: besides a
credential's bearer token, ``BearerAuthMiddleware`` takes

* ``Authorization: Bearer <token>`` with a session token from etcd's ``Auth.Authenticate``;
* ``Authorization: Basic <name:password>`` of a credential (its token as the password) or of a
  user added with ``etcdctl user add``.

A credential passes on to the usual scope check. An added user may call the key reads only,
``GET /v1/kv/{key}``, ``GET /v1/kv?prefix=`` and ``GET /v1/range`` (a key, a prefix or from a
key on, now or at a past revision: ``api.range_route``), each judged as etcd's Range on the
same key or range by the user's roles as of the read index (as etcd's API judges them; etcd
judges a Range at a past revision by today's roles too); anything else is refused (403) naming
what it may do."""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Callable
from typing import Final
from urllib.parse import parse_qs

from api.kv import READ_TIMEOUT_S
from kraft_spark.auth_users import TOKEN_PREFIX, Caller, Users
from kraft_spark.client.errors import ClientError
from kraft_spark.http_auth import Credentials
from kraft_spark.store.auth import AuthTable
from kraft_spark.store.key_range import FROM_KEY, prefix_end
from kraft_spark.store.past_reads import key_range
from kraft_spark.store.service import KvStore, NodeStore, ReadTimeoutError

KEY_PREFIX: Final = "/v1/kv/"
RANGE_PATH: Final = "/v1/kv"
RANGE_AT_PATH: Final = "/v1/range"


class HttpUsers:
    """Resolves the ``Authorization`` headers that are not a credential's bearer token."""

    def __init__(self, credentials: Credentials, store_of: Callable[[], KvStore | None]) -> None:
        def table() -> AuthTable | None:
            store = store_of()
            return store.applied_state().auth if isinstance(store, NodeStore) else None

        self._store = store_of
        self._users = Users(credentials, table)

    async def caller(self, header: bytes, query: bytes) -> Caller | None:
        """Who the header's session token or Basic name:password is; None if nobody. An added
        user is looked up after the read index (as etcd's API judges it: added, deleted,
        given a new password or a role through another node before the request began is in
        force); a credential, or a ``consistency=serializable`` read, on this node's state."""
        scheme, _, rest = header.strip().partition(b" ")
        scheme, rest = scheme.lower(), rest.strip()
        if scheme == b"bearer":
            if rest.startswith(TOKEN_PREFIX):
                await self._read_index(query)
            return self._users.from_token(rest)
        if scheme != b"basic":
            return None
        try:
            name, sep, password = base64.b64decode(rest, validate=True).partition(b":")
            text = name.decode()
        except (binascii.Error, ValueError):
            return None
        if not sep:
            return None
        if self._users.builtin_scope(text) is None:
            await self._read_index(query)
        found = await self._users.authenticate(text, password)
        return found[1] if found is not None else None

    async def _read_index(self, query: bytes) -> None:
        store = self._store()
        serializable = parse_qs(query.decode("latin-1")).get("consistency") == ["serializable"]
        if not isinstance(store, NodeStore) or serializable:
            return
        # On failure: judged on this node's state; the read itself answers the timeout.
        with contextlib.suppress(ClientError, ReadTimeoutError, TimeoutError):
            await store.read_offset(linearizable=True, timeout_s=READ_TIMEOUT_S)


def refusal(caller: Caller, method: str, path: str, query: bytes) -> str | None:
    """Why an added user may not make this request (None: it may)."""
    if method in ("GET", "HEAD"):
        if path.startswith(KEY_PREFIX):
            key, end = path[len(KEY_PREFIX):].encode(), b""
        elif path == RANGE_PATH:
            values = parse_qs(query.decode("latin-1")).get("prefix", [""])
            key = values[0].encode()
            end = prefix_end(key) if key else FROM_KEY
        elif path == RANGE_AT_PATH:
            key, end = _range_at_keys(query)
        else:
            key = end = b""
        if path.startswith(KEY_PREFIX) or path in (RANGE_PATH, RANGE_AT_PATH):
            if caller.allows(key, end, write=False):
                return None
            shown = (repr(key.decode(errors="replace") + ("*" if end else "")) if key
                     else "every key")
            return (f"the user {caller.name!r} (etcd's Auth API) may not read {shown}: etcd "
                    "permission denied (grant one of its roles READ on it: etcdctl role "
                    "grant-permission)")
    return (f"the user {caller.name!r} was added over etcd's Auth API: over HTTP it may only "
            f"read keys (GET /v1/kv/{{key}}, GET /v1/kv?prefix=, GET /v1/range), not {method} "
            f"{path}; use a "
            "credential of the HTTP credentials file for the rest")


def _range_at_keys(query: bytes) -> tuple[bytes, bytes]:
    """The key range ``GET /v1/range`` reads, from its query parsed as Starlette parses it
    (the last value of a repeated parameter) and its booleans as pydantic reads them (any
    other value is answered 422 before the route reads anything)."""
    values = parse_qs(query.decode("latin-1"), keep_blank_values=True)

    def last(name: str) -> str:
        return values.get(name, [""])[-1]

    def flag(name: str) -> bool:
        return last(name).lower() in ("1", "true", "on", "yes", "t", "y")  # pydantic's

    key = last("key").encode("utf-8", "surrogateescape")
    return key_range(key, prefix=flag("prefix"), from_key=flag("from_key"))


__all__ = ["HttpUsers", "refusal"]
