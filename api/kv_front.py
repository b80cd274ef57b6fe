"""``GET /v1/kv/{key}`` without FastAPI's per-request machinery: the hottest read.

Like the append path's front door (``api.fast_append``), it sits inside the same metrics and
bearer-token middleware and gives the route's answers byte for byte (tests/net compare them):
the route stays the documented one (OpenAPI) and answers whatever this does not claim (an
empty key, an invalid ``consistency``: the route's 422).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from api.kv import key_answer
from api.middleware import error_response, route_path, unexpected_error
from api.models import ApiError
from kraft_spark.store.service import KvStore

PREFIX = "/v1/kv/"


class FastKvRead:
    def __init__(self, app: ASGIApp, store: Callable[[], KvStore | None], route: Any) -> None:
        self.app = app
        self.store = store
        self.route = route

    def _claims(self, scope: Scope) -> tuple[bytes, bool] | None:
        """(key, linearizable) of a request this answers, else None."""
        path = route_path(scope)
        key = path[len(PREFIX):]
        if not key:
            return None
        consistency = "linearizable"
        for name, value in parse_qsl(scope.get("query_string", b"").decode("latin-1")):
            if name == "consistency":
                consistency = value
        if consistency not in ("linearizable", "serializable"):
            return None
        return key.encode("utf-8", errors="surrogateescape"), consistency == "linearizable"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        claimed = self._claims(scope)
        if claimed is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route
        key, linearizable = claimed
        try:
            body, headers = await key_answer(self.store(), key, linearizable=linearizable)
        except ApiError as exc:
            await error_response(exc.status, exc.message, exc.headers, exc.extra)(
                scope, receive, send)
            return
        except Exception as exc:
            await unexpected_error(exc)(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
            *((name.lower().encode(), value.encode()) for name, value in headers.items())]})
        await send({"type": "http.response.body", "body": body})
