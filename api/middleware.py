"""The HTTP API's ASGI middlewares: request metrics per route and status, and bearer-token
authentication with scopes (``kraft_spark.http_auth``: constant-time comparison; /healthz and
/readyz stay open)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.kv_users import HttpUsers, refusal
from kraft_spark.http_auth import Credentials, Identity, bearer_token, required_scope
from kraft_spark.metrics import HttpMetrics
from kraft_spark.store.service import KvStore

log = logging.getLogger("api.app")


class HttpMetricsMiddleware:
    """Records every request's latency by method and route template."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            route = getattr(scope.get("route"), "path", None)
            self.metrics.observe(
                str(scope.get("method", "")),
                route if isinstance(route, str) else "unmatched",
                status,
                (time.perf_counter() - start) * 1000.0,
            )


IDENTITY_KEY = "kraft_spark.identity"  # in an authenticated request's ASGI scope


def identity_of(scope: Scope) -> Identity | None:
    """The credential an authenticated request came with; None on a server without any."""
    found = scope.get(IDENTITY_KEY)
    return found if isinstance(found, Identity) else None


class BearerAuthMiddleware:
    """Requires ``Authorization: Bearer <token>`` of a credential whose scope covers the call
    (``kraft_spark.http_auth.required_scope``) on every path but the open ones: 401 without a
    known token, 403 with a token of too small a scope. Answers name what to send, never a
    token. With the node's ``store`` (``api.kv_users``), etcd's users are taken too: session
    tokens and HTTP Basic; an added user may only read the keys its roles allow."""

    def __init__(self, app: ASGIApp, credentials: Credentials,
                 store: Callable[[], KvStore | None] | None = None) -> None:
        self.app = app
        self.credentials = credentials
        self.users = HttpUsers(credentials, store) if store is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        needed = required_scope(str(scope.get("method", "GET")), route_path(scope))
        if needed is None:
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        if header is None:
            response = error_response(
                401,
                "missing Authorization header: send 'Authorization: Bearer <token>' with a "
                f"token of scope {needed.label} or above from the server's HTTP credentials "
                "(a generated set is in <data-dir>/http-credentials)",
                {"WWW-Authenticate": 'Bearer realm="kraft-spark"'},
            )
            await response(scope, receive, send)
            return
        token = bearer_token(header.encode("latin-1"))
        identity: Identity | None = (self.credentials.identify(token) if token is not None
                                     else None)
        if identity is None and self.users is not None:
            query = scope.get("query_string", b"")
            caller = await self.users.caller(header.encode("latin-1"), query)
            if caller is not None and not caller.builtin:
                problem = refusal(caller, str(scope.get("method", "GET")), route_path(scope),
                                  query)
                if problem is not None:
                    await error_response(403, problem)(scope, receive, send)
                    return
                scope[IDENTITY_KEY] = caller
                await self.app(scope, receive, send)
                return
            identity = caller
        if identity is None:
            response = error_response(
                401,
                "the Authorization header does not carry a token this server knows: send "
                "'Authorization: Bearer <token>' with a token from its HTTP credentials",
                {"WWW-Authenticate": 'Bearer realm="kraft-spark", error="invalid_token"'},
            )
            await response(scope, receive, send)
            return
        if identity.scope < needed:
            response = error_response(
                403,
                f"the credential {identity.name!r} has scope {identity.scope.label}; "
                f"{scope.get('method')} {route_path(scope)} needs scope {needed.label}: use a "
                f"credential of scope {needed.label} or above",
                {"WWW-Authenticate": 'Bearer realm="kraft-spark", error="insufficient_scope", '
                                     f'scope="{needed.label}"'},
            )
            await response(scope, receive, send)
            return
        scope[IDENTITY_KEY] = identity  # who asks: routes that act on what a caller owns
        await self.app(scope, receive, send)


# --------------------------------------------------------------------------- shared helpers


def error_response(status: int, message: str, headers: dict[str, str] | None = None,
                   extra: dict[str, Any] | None = None) -> Response:
    """``{"error": message}`` (and ``extra``'s fields: a 409's failed conditions)."""
    return JSONResponse({"error": message, **(extra or {})}, status_code=status, headers=headers)


def route_path(scope: Scope) -> str:
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root) :]
    return path


def unexpected_error(exc: Exception) -> Response:
    """The 500 answer to an exception no handler expected (logged with its traceback)."""
    log.exception("unexpected error in the HTTP sidecar", exc_info=exc)
    return error_response(
        500, f"internal error ({type(exc).__name__}: {exc}); see this server's log"
    )
