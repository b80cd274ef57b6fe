"""The HTTP sidecar (SPEC §12): FastAPI in front of a :class:`QuorumBackend`.

Routes::

    POST /v1/records              append one record or a batch; answers once committed
    GET  /v1/records              committed data records from an offset
    GET  /v1/quorum               DescribeQuorum with the status summary fields
    GET  /v1/quorum/replication   the replication table (leader, followers, observers)
    GET  /metrics                 Prometheus text
    GET  /healthz                 liveness: 200 while the process serves
    GET  /readyz                  200 when the quorum names a leader, else 503
    GET  /docs                    OpenAPI (Swagger UI); the schema at /openapi.json

Every error is JSON ``{"error": "<cause and fix>"}``: 400 invalid JSON, 415 not JSON, 422 wrong
fields, 413 body or record too large, 401 bad token, 503 + ``Retry-After`` while no leader is
known, 504 when a commit was not confirmed in time (the append may still commit).

A record ``{"key": "k", "value": <JSON>, "headers": {"h": "v"}}`` becomes a
:class:`~kraft_spark.client.types.NewRecord` with the key and header values as UTF-8 bytes and the
value as compact JSON (``json.dumps(value, separators=(",", ":"))``) in UTF-8; a JSON ``null``
value is a tombstone (``value=None``: deletes the key). The value is required, so a tombstone is
always explicit.

**Idempotency.** With an ``Idempotency-Key`` header the append runs at most once per key while the
process lives (an LRU of :data:`IDEMPOTENCY_KEYS` keys): a retry, even one that arrives while the
first is in flight, waits for and returns the first result (with ``Idempotent-Replayed: true``).
Such an append keeps waiting for its commit in the background for ``background_commit_s`` after the
request that started it gave up with 504, so a retry can still collect its result. Only when the
backend failed without appending (any client error but ``CommitTimeoutError``: no leader, record
refused, ...) is the key forgotten so a retry appends afresh; when the outcome is unknown (the
backend's own commit timeout, an unexpected exception) the key keeps answering with that failure
and never appends twice.

**Lifecycle.** Give either a ready ``backend`` (the caller owns and closes it) or a
``backend_factory``: the factory runs at application startup on the server's event loop and the
app closes the backend at shutdown on that same loop — use it for ``AsyncQuorumClient``, whose
asyncio state must live on the loop that serves the requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Final

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.direct import MAX_DIRECT_BODY, Answer
from api.models import (
    IDEMPOTENCY_KEYS,
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_OFFSET,
    MAX_READ_LIMIT,
    MAX_RECORDS_PER_REQUEST,
    READY_TIMEOUT_S,
    RECORD_SHAPE,
    RETRY_AFTER_S,
    ApiError,
    AppendRequest,
    AppendResponse,
    BatchIn,
    ErrorResponse,
    QuorumBackend,
    QuorumOut,
    ReadResponse,
    RecordIn,
    ReplicationRowOut,
    StatusOut,
)
from api.values import (
    JSON_TYPES,
    asgi_chunks,
    describe_errors,
    is_json_content_type,
    parse_json,
    plain_fields,
    read_limited,
    record_out,
    record_size,
    records_fingerprint,
    replica_out,
    to_new_records,
)
from kraft_spark.client.errors import (
    ClientError,
    ClusterIdMismatchError,
    CommitTimeoutError,
    InvalidRecordError,
    NoLeaderError,
    OffsetBelowLogStartError,
    RecordTooLargeError,
)
from kraft_spark.client.types import (
    AppendResult,
    NewRecord,
    QuorumInfo,
)
from kraft_spark.metrics import CONTENT_TYPE, HttpMetrics, Registry
from kraft_spark.quorum_report import replication_rows, status_summary

__all__ = [
    "IDEMPOTENCY_KEYS",
    "MAX_READ_LIMIT",
    "MAX_RECORDS_PER_REQUEST",
    "QuorumBackend",
    "create_app",
]

log = logging.getLogger(__name__)


def _error_response(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _client_error(exc: ClientError) -> ApiError:
    """Map a backend error (other than a commit timeout) to its HTTP answer."""
    if isinstance(exc, NoLeaderError):
        return ApiError(
            503,
            f"no quorum leader is known right now ({exc}); an election is probably in progress:"
            " retry after the Retry-After delay",
            {"Retry-After": RETRY_AFTER_S},
        )
    if isinstance(exc, RecordTooLargeError):
        return ApiError(413, f"the quorum refused the batch as too large ({exc}): send less data")
    if isinstance(exc, InvalidRecordError):
        return ApiError(422, f"the quorum refused the records as invalid: {exc}")
    if isinstance(exc, OffsetBelowLogStartError):
        return ApiError(410, str(exc))
    if isinstance(exc, ClusterIdMismatchError):
        return ApiError(
            502, f"the sidecar reached a node of another cluster ({exc}): fix its bootstrap list"
        )
    return ApiError(502, f"the quorum failed the request: {type(exc).__name__}: {exc}")


@dataclass(slots=True)
class _Entry:
    fingerprint: bytes
    task: asyncio.Future[AppendResult]


class _Appender:
    """Runs appends, sharing one append among requests with the same Idempotency-Key."""

    def __init__(self, capacity: int, commit_timeout_s: float, background_commit_s: float) -> None:
        self.capacity = capacity
        self.commit_timeout_s = commit_timeout_s
        self.background_commit_s = max(commit_timeout_s, background_commit_s)
        self.entries: OrderedDict[str, _Entry] = OrderedDict()
        # Strong references to appends in flight (the loop keeps only weak ones), including any
        # whose key was evicted; cancelled at shutdown.
        self.in_flight: set[asyncio.Future[AppendResult]] = set()
        self.backend: QuorumBackend | None = None

    def _backend(self) -> QuorumBackend:
        if self.backend is None:
            raise ApiError(503, "the sidecar is still starting", {"Retry-After": RETRY_AFTER_S})
        return self.backend

    async def append(self, records: list[NewRecord], key: str | None) -> tuple[AppendResult, bool]:
        backend = self._backend()
        if key is None:
            try:
                return await backend.append(records, timeout_s=self.commit_timeout_s), False
            except ClientError as exc:
                raise self.unkeyed_failure(exc) from None
        fingerprint = records_fingerprint(records)
        entry = self.entries.get(key)
        replayed = entry is not None
        if entry is None:
            task = asyncio.ensure_future(
                backend.append(records, timeout_s=self.background_commit_s)
            )
            entry = _Entry(fingerprint, task)
            self._remember(key, entry)
            self.in_flight.add(task)
            task.add_done_callback(lambda done: self._settled(key, entry, done))
        elif entry.fingerprint != fingerprint:
            raise ApiError(
                422,
                f"Idempotency-Key {key!r} was already used for a different request body: "
                "use a new key for a new request (a retry must repeat the same body)",
            )
        else:
            self.entries.move_to_end(key)
        settled = entry.task.done()
        try:
            result = await asyncio.wait_for(asyncio.shield(entry.task), self.commit_timeout_s)
        except TimeoutError:
            raise ApiError(
                504,
                f"the commit was not confirmed within {self.commit_timeout_s:g} s; the append may "
                f"still commit: retry with the same Idempotency-Key ({key!r}) to get its result "
                "without appending it twice",
            ) from None
        except CommitTimeoutError as exc:
            raise ApiError(
                504,
                f"the append under Idempotency-Key {key!r} was not confirmed committed within "
                f"{self.background_commit_s:g} s ({exc}); it may have committed. "
                + (
                    "This key will keep answering this way and never append again: "
                    if settled
                    else ""
                )
                + "check GET /v1/records, and only if the records are absent, append them "
                "under a new key",
            ) from None
        except ClientError as exc:
            raise _client_error(exc) from None
        return result, replayed

    def unkeyed_failure(self, exc: ClientError) -> ApiError:
        """The answer to an append without Idempotency-Key that failed with ``exc``."""
        if isinstance(exc, CommitTimeoutError):
            return ApiError(
                504,
                f"the append was sent but its commit was not confirmed within "
                f"{self.commit_timeout_s:g} s ({exc}); it may still commit. Retrying may "
                "append it twice: send an Idempotency-Key header so a retry is safe",
            )
        return _client_error(exc)

    def _remember(self, key: str, entry: _Entry) -> None:
        self.entries[key] = entry
        while len(self.entries) > self.capacity:
            # Evict the least recently used settled key; in-flight ones only if all are.
            victim = next((k for k, e in self.entries.items() if e.task.done()), None)
            if victim is None:
                victim = next(iter(self.entries))
            del self.entries[victim]

    def _settled(self, key: str, entry: _Entry, task: asyncio.Future[AppendResult]) -> None:
        self.in_flight.discard(task)
        if task.cancelled():
            refused = True
        else:
            # Every client error but a commit timeout means nothing was appended (the client
            # turns "no leader" after sending into CommitTimeoutError).
            error = task.exception()
            refused = isinstance(error, ClientError) and not isinstance(error, CommitTimeoutError)
        if refused and self.entries.get(key) is entry:
            del self.entries[key]

    async def shutdown(self) -> None:
        pending = list(self.in_flight)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


# --------------------------------------------------------------------------- middleware


class _HttpMetricsMiddleware:
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


class _BearerAuthMiddleware:
    """Requires ``Authorization: Bearer <token>`` on every path but the open ones."""

    def __init__(self, app: ASGIApp, token: str, open_paths: frozenset[str]) -> None:
        self.app = app
        self.token = token.encode("utf-8")
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _route_path(scope) in self.open_paths:
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        if header is None:
            response = _error_response(
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
            response = _error_response(
                401,
                "the Authorization header does not carry the sidecar's token: send "
                "'Authorization: Bearer <token>' with the token the sidecar was started with",
                {"WWW-Authenticate": 'Bearer realm="kraft-spark", error="invalid_token"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


# --------------------------------------------------------------------------- POST /v1/records


class _AppendEndpoint:
    """``POST /v1/records`` after routing: the checks, in order, and the append.

    Both ways in share it: the FastAPI route (documented in the OpenAPI schema) and
    :class:`_FastAppendMiddleware`, which answers the same requests without FastAPI's
    per-request machinery.
    """

    def __init__(
        self,
        appender: _Appender,
        metrics: HttpMetrics,
        max_body_bytes: int,
        max_record_bytes: int,
        max_records: int,
    ) -> None:
        self.appender = appender
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.max_record_bytes = max_record_bytes
        self.max_records = max_records

    @staticmethod
    def check_content_type(content_type: str | None) -> None:
        if not is_json_content_type(content_type):
            raise ApiError(
                415, f"unsupported Content-Type {content_type!r}: send application/json"
            )

    def records(self, body: bytes) -> list[NewRecord]:
        """The records of a request body, or the ApiError that says what is wrong with it."""
        parsed = parse_json(body)
        if not isinstance(parsed, dict):
            raise ApiError(
                422, f"the request body must be a JSON object, not {JSON_TYPES[type(parsed)]}. "
                + RECORD_SHAPE,
            )
        items = plain_fields(parsed)
        if items is None:
            items = [(r.key, r.value, r.headers) for r in self._validated(parsed)]
        if len(items) > self.max_records:
            raise ApiError(
                422, f"the batch holds {len(items)} records, over the limit of "
                f"{self.max_records} per request: split it",
            )
        records = to_new_records(items)
        for index, record in enumerate(records):
            size = record_size(record)
            if size > self.max_record_bytes:
                raise ApiError(
                    413,
                    f"records[{index}] is {size} bytes (key + value + headers), over the limit "
                    f"of {self.max_record_bytes} bytes: store large data elsewhere and append a "
                    "reference",
                )
        return records

    @staticmethod
    def _validated(parsed: dict[str, Any]) -> list[RecordIn]:
        try:
            return (
                BatchIn.model_validate(parsed).records
                if "records" in parsed
                else [RecordIn.model_validate(parsed)]
            )
        except ValidationError as exc:
            raise ApiError(
                422, f"invalid request body: {describe_errors(exc.errors())}. {RECORD_SHAPE}"
            ) from None

    async def append(self, body: bytes, key: str | None) -> tuple[AppendResult, bool]:
        """Append the body's records; (result, whether it replays an earlier request's)."""
        records = self.records(body)
        result, replayed = await self.appender.append(records, key)
        if not replayed:
            self.metrics.appended_records.inc(len(records))
        return result, replayed


def _idempotency_key_error(key: str) -> ApiError | None:
    """The answer FastAPI's ``Header(min_length=1, max_length=...)`` check gives, or None."""
    if not key:
        problem = "String should have at least 1 character"
    elif len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        problem = f"String should have at most {MAX_IDEMPOTENCY_KEY_CHARS} characters"
    else:
        return None
    return ApiError(422, f"invalid request: header Idempotency-Key: {problem}")


def _append_json(result: AppendResult) -> bytes:
    return (
        f'{{"base_offset":{result.base_offset},"last_offset":{result.last_offset},'
        f'"epoch":{result.epoch}}}'
    ).encode()


class _FastAppendMiddleware:
    """Answers ``POST /v1/records`` itself, with the same checks and answers as the route.

    FastAPI's request handling (request object, dependency solving, response-model validation
    and serialization, two exit stacks) cost ~100 µs per append, five times what uvicorn itself
    spends, and made the sidecar's core the ceiling under concurrent load. Placed inside the
    metrics and auth middleware, so both still apply; ``scope["route"]`` is set to the route so
    metrics label it as the route would be.
    """

    def __init__(self, app: ASGIApp, endpoint: _AppendEndpoint, route: Any) -> None:
        self.app = app
        self.endpoint = endpoint
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or _route_path(scope) != "/v1/records"
        ):
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route
        extra: list[tuple[bytes, bytes]] = []
        try:
            content_type = declared = key = None
            for name, value in scope["headers"]:
                if name == b"content-type":
                    content_type = value.decode("latin-1")
                elif name == b"content-length":
                    declared = value.decode("latin-1")
                elif name == b"idempotency-key":
                    key = value.decode("latin-1")
            if key is not None and (error := _idempotency_key_error(key)) is not None:
                raise error
            self.endpoint.check_content_type(content_type)
            body = await read_limited(
                declared, asgi_chunks(receive), self.endpoint.max_body_bytes
            )
            result, replayed = await self.endpoint.append(body, key)
        except ApiError as exc:
            await _error_response(exc.status, exc.message, exc.headers)(scope, receive, send)
            return
        except Exception as exc:
            await _unexpected(exc)(scope, receive, send)
            return
        payload = _append_json(result)
        if replayed:
            extra.append((b"idempotent-replayed", b"true"))
        await send({
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-length", str(len(payload)).encode()),
                (b"content-type", b"application/json"),
                *extra,
            ],
        })
        await send({"type": "http.response.body", "body": payload})


class _DirectAppend:
    """``POST /v1/records`` answered from uvicorn's protocol callbacks (``api.direct``), with no
    ASGI task, when the backend can start an append at once (``start_append``: the embedded API
    of the node that leads). Only the plain success path is claimed: a request with an
    Idempotency-Key, a missing or wrong token, a body that is not JSON or fails a check, or an
    append the backend cannot start here (this node does not lead) goes to the ASGI app, which
    gives the same answers as before. Once started, the append's outcome is answered here with
    the app's own messages (``_Appender.unkeyed_failure``)."""

    def __init__(self, endpoint: _AppendEndpoint, token: str | None) -> None:
        self.endpoint = endpoint
        self.token = token.encode("utf-8") if token is not None else None
        self.max_body = min(MAX_DIRECT_BODY, endpoint.max_body_bytes)
        self.answered = 0  # requests answered here, not by the app (tests, diagnostics)

    def wants(self, scope: Scope) -> bool:
        if scope["method"] != "POST" or _route_path(scope) != "/v1/records":
            return False
        length = authorization = content_type = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = value
            elif name == b"content-type":
                content_type = value
            elif name == b"authorization":
                authorization = value
            elif name in (b"idempotency-key", b"transfer-encoding"):
                return False
        if length is None or not length.isdigit() or int(length) > self.max_body:
            return False
        if content_type is not None and not is_json_content_type(content_type.decode("latin-1")):
            return False
        if self.token is not None:
            scheme, _, credentials = (authorization or b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credentials.strip(), self.token
            ):
                return False
        return True

    def handle(self, scope: Scope, body: bytes, answer: Answer) -> bool:
        started = time.perf_counter()
        appender = self.endpoint.appender
        start_append = getattr(appender.backend, "start_append", None)
        if start_append is None:
            return False
        try:
            records = self.endpoint.records(body)
        except ApiError:
            return False  # the app gives the answer

        def done(result: AppendResult | None, exc: BaseException | None) -> None:
            headers: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json")]
            if exc is None:
                assert result is not None
                status, payload = 200, _append_json(result)
                self.endpoint.metrics.appended_records.inc(len(records))
            else:
                if isinstance(exc, ClientError):
                    error = appender.unkeyed_failure(exc)
                else:
                    log.error("unexpected error in the HTTP sidecar", exc_info=exc)
                    error = ApiError(
                        500, f"internal error ({type(exc).__name__}: {exc}); see this server's "
                        "log",
                    )
                status, payload = error.status, _error_json(error.message)
                headers += [
                    (name.lower().encode("latin-1"), value.encode("latin-1"))
                    for name, value in error.headers.items()
                ]
            self.endpoint.metrics.observe(
                "POST", "/v1/records", status, (time.perf_counter() - started) * 1000.0
            )
            self.answered += 1
            answer(status, headers, payload)

        return bool(start_append(records, appender.commit_timeout_s, done))


def _error_json(message: str) -> bytes:
    """``{"error": message}`` as ``_error_response`` renders it (Starlette's JSONResponse)."""
    return json.dumps(
        {"error": message}, ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode("utf-8")


class _SidecarApp(FastAPI):
    """FastAPI with a front door: ``POST /v1/records`` goes to ``front`` (the fast path inside
    the same metrics and auth middleware) before FastAPI's own stack, whose error, telemetry
    and body-limit layers cost about a third of an append's CPU in the sidecar (FastAPI 0.165
    looks up OpenTelemetry settings in the environment on every request). The fast path
    answers every error itself, so it needs none of them; all other requests take the full
    stack."""

    front: ASGIApp | None = None
    # Found by api.direct's protocol: appends answered without an ASGI task.
    direct_handler: _DirectAppend | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        front = self.front
        if (front is not None and scope["type"] == "http" and scope["method"] == "POST"
                and _route_path(scope) == "/v1/records"):
            await front(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _route_path(scope: Scope) -> str:
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root) :]
    return path


def _unexpected(exc: Exception) -> Response:
    log.exception("unexpected error in the HTTP sidecar", exc_info=exc)
    return _error_response(
        500, f"internal error ({type(exc).__name__}: {exc}); see this server's log"
    )


# --------------------------------------------------------------------------- the app


_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in (
        (400, "Invalid JSON"),
        (401, "Missing or wrong bearer token"),
        (413, "Body or record too large"),
        (410, "Offset below the log start (deleted by retention; see the snapshot)"),
        (415, "Not JSON"),
        (422, "Invalid fields"),
        (503, "No leader known (see Retry-After)"),
        (504, "Commit not confirmed in time; it may still commit"),
    )
}


def create_app(
    backend: QuorumBackend | None = None,
    *,
    backend_factory: Callable[[], QuorumBackend] | None = None,
    token: str | None = None,
    max_body_bytes: int = 1_048_576,
    max_record_bytes: int = 1_000_000,
    max_records: int = MAX_RECORDS_PER_REQUEST,
    metrics: Registry | None = None,
    commit_timeout_s: float = 10.0,
    background_commit_s: float = 60.0,
    idempotency_keys: int = IDEMPOTENCY_KEYS,
    fast_append: bool = True,
) -> FastAPI:
    """The sidecar app. Give ``backend`` (caller-owned) or ``backend_factory`` (called at startup
    on the serving loop; the app closes what it returns at shutdown). ``fast_append=False``
    serves ``POST /v1/records`` through FastAPI's route instead of :class:`_FastAppendMiddleware`
    (same answers, slower; the tests run both)."""
    if (backend is None) == (backend_factory is None):
        raise ValueError("give exactly one of backend and backend_factory")
    if not 1 <= max_records <= MAX_RECORDS_PER_REQUEST:
        raise ValueError(f"max_records must be between 1 and {MAX_RECORDS_PER_REQUEST}")
    registry = metrics if metrics is not None else Registry()
    http_metrics = HttpMetrics(registry)
    appender = _Appender(idempotency_keys, commit_timeout_s, background_commit_s)
    appender.backend = backend
    endpoint = _AppendEndpoint(
        appender, http_metrics, max_body_bytes, max_record_bytes, max_records
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
        return _error_response(exc.status, exc.message, exc.headers)

    async def on_validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return _error_response(422, f"invalid request: {describe_errors(list(exc.errors()))}")

    async def on_http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return _error_response(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    async def on_unexpected(_: Request, exc: Exception) -> Response:
        return _unexpected(exc)

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
                description="Retries with the same key return the first result; never append "
                "twice (kept while the server runs, for the last 10,000 keys).",
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
    open_paths = frozenset({"/healthz"})
    if token is not None:
        if not token:
            raise ValueError("token must be non-empty (or None for no authentication)")
        app.add_middleware(_BearerAuthMiddleware, token=token, open_paths=open_paths)
    app.add_middleware(_HttpMetricsMiddleware, metrics=http_metrics)
    # ---- the front door for appends: the same metrics → auth, then the fast path
    if fast_append:
        append_route = next(
            r for r in app.routes if getattr(r, "path", None) == "/v1/records"
            and "POST" in getattr(r, "methods", ())
        )
        front: ASGIApp = _FastAppendMiddleware(app, endpoint=endpoint, route=append_route)
        if token is not None:
            front = _BearerAuthMiddleware(front, token=token, open_paths=open_paths)
        app.front = _HttpMetricsMiddleware(front, metrics=http_metrics)
        app.direct_handler = _DirectAppend(endpoint, token)

    # ---- the other routes
    @app.get(
        "/v1/records",
        response_model=ReadResponse,
        responses={k: _ERRORS[k] for k in (401, 410, 422, 503)},
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
            raise _client_error(exc) from None
        next_offset = records[-1].offset + 1 if records else from_offset
        return ReadResponse(records=[record_out(r) for r in records], next_offset=next_offset)

    async def describe() -> QuorumInfo:
        try:
            return await current_backend().describe_quorum()
        except ClientError as exc:
            raise _client_error(exc) from None

    @app.get(
        "/v1/quorum",
        response_model=QuorumOut,
        responses={k: _ERRORS[k] for k in (401, 503)},
        summary="DescribeQuorum with the status summary fields",
        tags=["quorum"],
    )
    async def quorum() -> QuorumOut:
        info = await describe()
        return QuorumOut(
            **status_summary(info),
            voters=[replica_out(v) for v in info.voters],
            observers=[replica_out(o) for o in info.observers],
            logStartOffset=info.log_start_offset,
            latestSnapshot=info.latest_snapshot,
        )

    @app.get(
        "/v1/quorum/replication",
        response_model=list[ReplicationRowOut],
        responses={k: _ERRORS[k] for k in (401, 503)},
        summary="The replication table: leader, then followers, then observers",
        tags=["quorum"],
    )
    async def replication() -> list[ReplicationRowOut]:
        return [ReplicationRowOut(**row) for row in replication_rows(await describe())]

    @app.get("/metrics", response_class=PlainTextResponse, tags=["operations"])
    async def prometheus() -> Response:
        return Response(registry.render(), media_type=CONTENT_TYPE)

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
            raise _client_error(exc) from None
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
            body = TypeAdapter(AppendRequest).json_schema(
                ref_template="#/components/schemas/{model}"
            )
            components = schema.setdefault("components", {})
            components.setdefault("schemas", {}).update(body.pop("$defs", {}))
            schema["paths"]["/v1/records"]["post"]["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": body}},
            }
            if token is not None:
                components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
                schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
