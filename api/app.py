"""The HTTP sidecar (docs/reference/http-api.md): FastAPI in front of a :class:`QuorumBackend`.

Routes::

    POST /v1/records              append one record or a batch; answers once committed
    GET  /v1/records              committed data records from an offset
    GET  /v1/quorum               DescribeQuorum with the status summary fields
    GET  /v1/quorum/replication   the replication table (leader, followers, observers)
    GET  /v1/kv/{key}, /v1/kv     reads by key and by prefix (api.kv)
    GET  /v1/watch                a stream of the writes to a key or prefix (api.watch_route)
    GET  /metrics                 Prometheus text
    GET  /healthz                 liveness: 200 while the process serves
    GET  /readyz                  200 when the quorum names a leader, else 503
    GET  /docs                    OpenAPI (Swagger UI); the schema at /openapi.json

Every error is JSON ``{"error": "<cause and fix>"}``: 400 invalid JSON, 415 not JSON, 422 wrong
fields, 413 body or record too large, 401 bad token, 403 a token of too small a scope, 503 +
``Retry-After`` while no leader is known, 504 when a commit was not confirmed in time (the
append may still commit).

A record ``{"key": "k", "value": <JSON>, "headers": {"h": "v"}}`` becomes a
:class:`~kraft_spark.client.types.NewRecord` with the key and header values as UTF-8 bytes and the
value as compact JSON (``json.dumps(value, separators=(",", ":"))``) in UTF-8; a JSON ``null``
value is a tombstone (``value=None``: deletes the key). The value is required, so a tombstone is
always explicit.

**Idempotency.** With an ``Idempotency-Key`` header the append runs at most once per key: the key
goes to the quorum (``QuorumBackend.append(idempotency_key=...)``), whose replicated producer table
answers every retry of the key, through any node or process and under any later leader, with the
first append's offsets. Within this process an LRU of :data:`IDEMPOTENCY_KEYS` keys also lets a
retry that arrives while the first is in flight wait for its result (``Idempotent-Replayed:
true``) and refuses a retry with another body (422). Such an append keeps waiting for its commit
in the background for ``background_commit_s`` after the request that started it gave up with 504,
so a retry can still collect its result; once it failed, the key is forgotten here and a retry
asks the quorum again (which never appends it twice).

**Lifecycle.** Give either a ready ``backend`` (the caller owns and closes it) or a
``backend_factory``: the factory runs at application startup on the server's event loop and the
app closes the backend at shutdown on that same loop — use it for ``AsyncQuorumClient``, whose
asyncio state must live on the loop that serves the requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Final

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import PlainTextResponse, Response
from pydantic import TypeAdapter
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from api.appends import (
    Appender,
    client_error,
)
from api.conditional import ConditionalBatchIn
from api.fast_append import (
    AppendEndpoint,
    FastAppendMiddleware,
)
from api.kv import kv_router
from api.kv_front import FastKvRead
from api.leases import leases_router
from api.middleware import (
    BearerAuthMiddleware,
    HttpMetricsMiddleware,
    error_response,
    route_path,
    unexpected_error,
)
from api.models import (
    IDEMPOTENCY_KEYS,
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_OFFSET,
    MAX_READ_LIMIT,
    MAX_RECORDS_PER_REQUEST,
    READY_TIMEOUT_S,
    RETRY_AFTER_S,
    ApiError,
    AppendRequest,
    AppendResponse,
    ErrorResponse,
    QuorumBackend,
    QuorumOut,
    ReadResponse,
    ReplicationRowOut,
    StatusOut,
)
from api.range_route import range_router
from api.values import (
    describe_errors,
    read_limited,
    record_out,
    replica_out,
)
from api.voters import voters_router
from api.watch_route import watch_router
from kraft_spark.client.errors import (
    ClientError,
)
from kraft_spark.client.types import (
    QuorumInfo,
)
from kraft_spark.http_auth import Credentials
from kraft_spark.metrics import HttpMetrics, Registry
from kraft_spark.quorum_report import replication_rows, status_summary
from kraft_spark.store.service import KvStore, WatchSource

__all__ = [
    "IDEMPOTENCY_KEYS",
    "MAX_READ_LIMIT",
    "MAX_RECORDS_PER_REQUEST",
    "QuorumBackend",
    "create_app",
]

log = logging.getLogger(__name__)


class _SidecarApp(FastAPI):
    """FastAPI with a front door: ``POST /v1/records`` goes to ``front`` (the fast path inside
    the same metrics and auth middleware) before FastAPI's own stack, whose error, telemetry
    and body-limit layers cost about a third of an append's CPU in the sidecar (FastAPI 0.165
    looks up OpenTelemetry settings in the environment on every request). The fast path
    answers every error itself, so it needs none of them; all other requests take the full
    stack."""

    front: ASGIApp | None = None
    # GET /v1/kv/{key} the same way (api.kv_front).
    front_reads: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            front = self.front
            if (front is not None and scope["method"] == "POST"
                    and route_path(scope) == "/v1/records"):
                await front(scope, receive, send)
                return
            reads = self.front_reads
            if (reads is not None and scope["method"] == "GET"
                    and route_path(scope).startswith("/v1/kv/")):
                await reads(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


# --------------------------------------------------------------------------- the app


_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in (
        (400, "Invalid JSON"),
        (401, "Missing or unknown bearer token"),
        (403, "The token's scope does not cover the call (read < write < admin)"),
        (404, "No such key or lease"),
        (413, "Body or record too large"),
        (410, "Offset below the log start (deleted by retention; see the snapshot), or a "
              "conditional write's outcome older than the outcome window"),
        (415, "Not JSON"),
        (409, "A condition of a conditional write failed; nothing was written"),
        (422, "Invalid fields"),
        (503, "No leader known (see Retry-After)"),
        (504, "Commit not confirmed in time; it may still commit"),
    )
}


def create_app(
    backend: QuorumBackend | None = None,
    *,
    backend_factory: Callable[[], QuorumBackend] | None = None,
    credentials: Credentials | None = None,
    max_body_bytes: int = 1_048_576,
    max_record_bytes: int = 1_000_000,
    max_records: int = MAX_RECORDS_PER_REQUEST,
    metrics: Registry | None = None,
    commit_timeout_s: float = 10.0,
    background_commit_s: float = 60.0,
    idempotency_keys: int = IDEMPOTENCY_KEYS,
    fast_append: bool = True,
    http_urls: Callable[[], dict[int, str]] | None = None,
    store: Callable[[], KvStore | None] | None = None,
) -> FastAPI:
    """The sidecar app. Give ``backend`` (caller-owned) or ``backend_factory`` (called at startup
    on the serving loop; the app closes what it returns at shutdown). ``fast_append=False``
    serves ``POST /v1/records`` through FastAPI's route instead of :class:`FastAppendMiddleware`
    (same answers, slower; the tests run both). ``http_urls``: the HTTP API of each node (node
    id -> URL), advertised by ``GET /v1/quorum`` with the leader's. ``store``: this process's
    copy of the store's state (``NodeStore``), for reads by key, conditional writes and watches
    (None, or returning None: those answer 503 naming where to send them)."""
    if (backend is None) == (backend_factory is None):
        raise ValueError("give exactly one of backend and backend_factory")
    if not 1 <= max_records <= MAX_RECORDS_PER_REQUEST:
        raise ValueError(f"max_records must be between 1 and {MAX_RECORDS_PER_REQUEST}")
    registry = metrics if metrics is not None else Registry()
    http_metrics = HttpMetrics(registry)
    appender = Appender(idempotency_keys, commit_timeout_s, background_commit_s)
    appender.backend = backend
    store_of: Callable[[], KvStore | None] = store if store is not None else (lambda: None)
    endpoint = AppendEndpoint(
        appender, http_metrics, max_body_bytes, max_record_bytes, max_records, store=store_of
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        owned: QuorumBackend | None = None
        if backend_factory is not None:
            owned = appender.backend = backend_factory()
        try:
            yield
        finally:
            await appender.shutdown()
            if owned is not None:
                appender.backend = None
                await owned.close()

    app = _SidecarApp(
        title="kraft-spark sidecar",
        version="0.1.0",
        description="Append to and read from the kraft-spark quorum; describe the quorum.",
        lifespan=lifespan,
    )

    # ---- error handlers: every error is {"error": ...}
    async def on_api_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.message, exc.headers, exc.extra)

    async def on_validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(422, f"invalid request: {describe_errors(list(exc.errors()))}")

    async def on_http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    async def on_unexpected(_: Request, exc: Exception) -> Response:
        return unexpected_error(exc)

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)

    def current_backend() -> QuorumBackend:
        return appender._backend()

    # ---- routes
    @app.post(
        "/v1/records",
        response_model=AppendResponse,
        responses=_ERRORS,
        summary="Append one record or a batch; answers once committed",
        tags=["records"],
    )
    async def append_records(
        request: Request,
        response: Response,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias="Idempotency-Key",
                min_length=1,
                max_length=MAX_IDEMPOTENCY_KEY_CHARS,
                description="Retries with the same key return the first result, through any "
                "node and across leader changes; never append twice.",
            ),
        ] = None,
    ) -> AppendResponse:
        endpoint.check_content_type(request.headers.get("content-type"))
        body = await read_limited(
            request.headers.get("content-length"), request.stream(), max_body_bytes
        )
        result, replayed = await endpoint.append(body, idempotency_key)
        if replayed:
            response.headers["Idempotent-Replayed"] = "true"
        return AppendResponse(
            base_offset=result.base_offset, last_offset=result.last_offset, epoch=result.epoch
        )

    # ---- middleware: metrics (outermost) → auth → routes
    # (add_middleware puts each new one outside the ones added before it)
    if credentials is not None:
        app.add_middleware(BearerAuthMiddleware, credentials=credentials, store=store_of)
    app.add_middleware(HttpMetricsMiddleware, metrics=http_metrics)
    # ---- the front door for appends: the same metrics → auth, then the fast path
    if fast_append:
        append_route = next(
            r for r in app.routes if getattr(r, "path", None) == "/v1/records"
            and "POST" in getattr(r, "methods", ())
        )
        front: ASGIApp = FastAppendMiddleware(app, endpoint=endpoint, route=append_route)
        if credentials is not None:
            front = BearerAuthMiddleware(front, credentials, store_of)
        app.front = HttpMetricsMiddleware(front, metrics=http_metrics)

    # ---- the other routes
    @app.get(
        "/v1/records",
        response_model=ReadResponse,
        responses={k: _ERRORS[k] for k in (401, 403, 410, 422, 503)},
        summary="Committed data records from an offset",
        tags=["records"],
    )
    async def read_records(
        from_offset: Annotated[
            int, Query(ge=0, le=MAX_OFFSET, description="First offset to return.")
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_READ_LIMIT)] = 100,
    ) -> ReadResponse:
        try:
            records = await current_backend().read(from_offset, limit)
        except ClientError as exc:
            raise client_error(exc) from None
        next_offset = records[-1].offset + 1 if records else from_offset
        return ReadResponse(records=[record_out(r) for r in records], next_offset=next_offset)

    async def describe() -> QuorumInfo:
        try:
            return await current_backend().describe_quorum()
        except ClientError as exc:
            raise client_error(exc) from None

    @app.get(
        "/v1/quorum",
        response_model=QuorumOut,
        responses={k: _ERRORS[k] for k in (401, 403, 503)},
        summary="DescribeQuorum with the status summary fields",
        tags=["quorum"],
    )
    async def quorum() -> QuorumOut:
        info = await describe()
        urls = http_urls() if http_urls is not None else {}
        return QuorumOut(
            **status_summary(info),
            voters=[replica_out(v) for v in info.voters],
            observers=[replica_out(o) for o in info.observers],
            logStartOffset=info.log_start_offset,
            latestSnapshot=info.latest_snapshot,
            httpUrls={str(k): v for k, v in sorted(urls.items())} if urls else None,
            leaderHttpUrl=urls.get(info.leader_id),
        )

    @app.get(
        "/v1/quorum/replication",
        response_model=list[ReplicationRowOut],
        responses={k: _ERRORS[k] for k in (401, 403, 503)},
        summary="The replication table: leader, then followers, then observers",
        tags=["quorum"],
    )
    async def replication() -> list[ReplicationRowOut]:
        return [ReplicationRowOut(**row) for row in replication_rows(await describe())]

    app.include_router(voters_router(current_backend, _ERRORS))
    kv_routes = kv_router(store_of, _ERRORS)
    app.include_router(kv_routes)
    if fast_append:  # the hottest read gets the same kind of front door (api.kv_front)
        read_route = next(r for r in kv_routes.routes
                          if getattr(r, "path", None) == "/v1/kv/{key:path}")
        async def routed(scope: Scope, receive: Receive, send: Send) -> None:
            await FastAPI.__call__(app, scope, receive, send)  # the route, past the front

        reads: ASGIApp = FastKvRead(routed, store_of, read_route)
        if credentials is not None:
            reads = BearerAuthMiddleware(reads, credentials, store_of)
        app.front_reads = HttpMetricsMiddleware(reads, metrics=http_metrics)
    app.include_router(range_router(store_of, _ERRORS))
    app.include_router(leases_router(current_backend, store_of, _ERRORS, commit_timeout_s))

    def hub() -> WatchSource | None:
        found = store_of()
        return found.watch_hub() if found is not None else None

    app.include_router(watch_router(hub, _ERRORS))

    @app.get("/metrics", response_class=PlainTextResponse, tags=["operations"])
    async def prometheus(request: Request) -> Response:
        # prometheus-client's exposition: OpenMetrics when the scraper's Accept asks for it.
        body, content_type = registry.exposition(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    @app.get("/healthz", response_model=StatusOut, tags=["operations"])
    async def healthz() -> StatusOut:
        return StatusOut(status="ok")

    @app.get(
        "/readyz",
        response_model=StatusOut,
        responses={503: {"model": ErrorResponse, "description": "No leader known"}},
        tags=["operations"],
    )
    async def readyz() -> StatusOut:
        try:
            info = await asyncio.wait_for(current_backend().describe_quorum(), READY_TIMEOUT_S)
        except TimeoutError:
            raise ApiError(
                503, f"the quorum did not answer DescribeQuorum within {READY_TIMEOUT_S:g} s",
                {"Retry-After": RETRY_AFTER_S},
            ) from None
        except ClientError as exc:
            raise client_error(exc) from None
        if info.leader_id < 0:
            raise ApiError(
                503, "no quorum leader is known yet: an election is in progress",
                {"Retry-After": RETRY_AFTER_S},
            )
        return StatusOut(status="ready", leaderId=info.leader_id, leaderEpoch=info.leader_epoch)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            body = TypeAdapter(AppendRequest | ConditionalBatchIn).json_schema(
                ref_template="#/components/schemas/{model}"
            )
            components = schema.setdefault("components", {})
            components.setdefault("schemas", {}).update(body.pop("$defs", {}))
            schema["paths"]["/v1/records"]["post"]["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": body}},
            }
            if credentials is not None:
                components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
                schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
