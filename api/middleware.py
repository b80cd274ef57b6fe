"""The HTTP API's ASGI middlewares: request metrics per route and status, and bearer-token
authentication (constant-time comparison; /healthz stays open)."""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kraft_spark.metrics import HttpMetrics

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


class BearerAuthMiddleware:
    """Requires ``Authorization: Bearer <token>`` on every path but the open ones."""

    def __init__(self, app: ASGIApp, token: str, open_paths: frozenset[str]) -> None:
        self.app = app
        self.token = token.encode("utf-8")
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if route_path(scope) in self.open_paths:
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        if header is None:
            response = error_response(
                401,
                "missing Authorization header: send 'Authorization: Bearer <token>' with the "
                "sidecar's token",
                {"WWW-Authenticate": 'Bearer realm="kraft-spark"'},
            )
            await response(scope, receive, send)
            return
        scheme, _, credentials = header.partition(" ")
        given = credentials.strip().encode("latin-1")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self.token):
            response = error_response(
                401,
                "the Authorization header does not carry the sidecar's token: send "
                "'Authorization: Bearer <token>' with the token the sidecar was started with",
                {"WWW-Authenticate": 'Bearer realm="kraft-spark", error="invalid_token"'},
            )
            await response(scope, receive, send)
            return
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
