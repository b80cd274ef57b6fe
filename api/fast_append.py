"""POST /v1/records without FastAPI's per-request work: the append endpoint, the fast-append
middleware that answers the same requests directly in ASGI, and the direct path that appends
from the server's own thread (api.direct). Answers are byte for byte those of the app's
route (tests/api compare them)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from api.appends import (
    Appender,
)
from api.conditional import judge, no_store_error, parse_conditional, with_conditions
from api.direct import MAX_DIRECT_BODY, Answer
from api.lease_writes import lease_field, with_lease
from api.middleware import (
    error_response,
    route_path,
    unexpected_error,
)
from api.models import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    RECORD_SHAPE,
    ApiError,
    BatchIn,
    RecordIn,
)
from api.values import (
    JSON_TYPES,
    asgi_chunks,
    describe_errors,
    is_json_content_type,
    parse_json,
    plain_fields,
    read_limited,
    record_size,
    to_records,
)
from kraft_spark.client.errors import (
    ClientError,
)
from kraft_spark.client.types import (
    AppendRecord,
    AppendResult,
)
from kraft_spark.http_auth import Credentials, bearer_token
from kraft_spark.http_auth import Scope as AuthScope
from kraft_spark.metrics import HttpMetrics
from kraft_spark.store.service import KvStore
from kraft_spark.store.txn import Condition

log = logging.getLogger("api.app")


class AppendEndpoint:
    """``POST /v1/records`` after routing: the checks, in order, and the append.

    Both ways in share it: the FastAPI route (documented in the OpenAPI schema) and
    :class:`FastAppendMiddleware`, which answers the same requests without FastAPI's
    per-request machinery.
    """

    def __init__(
        self,
        appender: Appender,
        metrics: HttpMetrics,
        max_body_bytes: int,
        max_record_bytes: int,
        max_records: int,
        *,
        store: Callable[[], KvStore | None] = lambda: None,
    ) -> None:
        self.store = store
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

    def records(self, body: bytes) -> list[AppendRecord]:
        """The records of a request body without conditions, or the ApiError that says what is
        wrong with it (a conditional body included: ``parse`` takes those)."""
        records, judged = self.parse(body)
        if judged:
            raise ApiError(422, "a conditional or leased write: parse it with "
                                "AppendEndpoint.parse")
        return records

    def parse(self, body: bytes) -> tuple[list[AppendRecord], bool]:
        """The records of a request body, and whether their outcome must be judged by the
        state machine (conditions or a lease); or the ApiError that says what is wrong."""
        parsed = parse_json(body)
        if not isinstance(parsed, dict):
            raise ApiError(
                422, f"the request body must be a JSON object, not {JSON_TYPES[type(parsed)]}. "
                + RECORD_SHAPE,
            )
        lease = lease_field(parsed)
        conditions: list[Condition] = []
        items = plain_fields(parsed)
        if items is None and "conditions" in parsed:
            items, conditions = parse_conditional(parsed)
        elif items is None:
            items = [(r.key, r.value, r.headers) for r in self._validated(parsed)]
        if len(items) > self.max_records:
            raise ApiError(
                422, f"the batch holds {len(items)} records, over the limit of "
                f"{self.max_records} per request: split it",
            )
        records = to_records(items)
        if lease is not None:
            records = with_lease(records, lease)
        if conditions:
            records = with_conditions(records, conditions)
        for index, record in enumerate(records):
            size = record_size(record)
            if size > self.max_record_bytes:
                raise ApiError(
                    413,
                    f"records[{index}] is {size} bytes (key + value + headers), over the limit "
                    f"of {self.max_record_bytes} bytes: store large data elsewhere and append a "
                    "reference",
                )
        return records, bool(conditions) or lease is not None

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
        """Append the body's records; (result, whether it replays an earlier request's). With
        conditions: once this node's state has applied them, ApiError 409 if one failed."""
        records, judged = self.parse(body)
        store = None
        if judged:
            store = self.store()
            if store is None:
                raise no_store_error()
        result, replayed = await self.appender.append(records, key)
        if not replayed:
            self.metrics.appended_records.inc(len(records))
        if store is not None:
            await judge(store, result, self.appender.commit_timeout_s)
        return result, replayed


def idempotency_key_error(key: str) -> ApiError | None:
    """The answer FastAPI's ``Header(min_length=1, max_length=...)`` check gives, or None."""
    if not key:
        problem = "String should have at least 1 character"
    elif len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        problem = f"String should have at most {MAX_IDEMPOTENCY_KEY_CHARS} characters"
    else:
        return None
    return ApiError(422, f"invalid request: header Idempotency-Key: {problem}")


def append_json(result: AppendResult) -> bytes:
    return (
        f'{{"base_offset":{result.base_offset},"last_offset":{result.last_offset},'
        f'"epoch":{result.epoch}}}'
    ).encode()


class FastAppendMiddleware:
    """Answers ``POST /v1/records`` itself, with the same checks and answers as the route.

    FastAPI's request handling (request object, dependency solving, response-model validation
    and serialization, two exit stacks) cost ~100 µs per append, five times what uvicorn itself
    spends, and made the sidecar's core the ceiling under concurrent load. Placed inside the
    metrics and auth middleware, so both still apply; ``scope["route"]`` is set to the route so
    metrics label it as the route would be.
    """

    def __init__(self, app: ASGIApp, endpoint: AppendEndpoint, route: Any) -> None:
        self.app = app
        self.endpoint = endpoint
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or route_path(scope) != "/v1/records"
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
            if key is not None and (error := idempotency_key_error(key)) is not None:
                raise error
            self.endpoint.check_content_type(content_type)
            body = await read_limited(
                declared, asgi_chunks(receive), self.endpoint.max_body_bytes
            )
            result, replayed = await self.endpoint.append(body, key)
        except ApiError as exc:
            await error_response(exc.status, exc.message, exc.headers, exc.extra)(
                scope, receive, send)
            return
        except Exception as exc:
            await unexpected_error(exc)(scope, receive, send)
            return
        payload = append_json(result)
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


class DirectAppend:
    """``POST /v1/records`` answered from uvicorn's protocol callbacks (``api.direct``), with no
    ASGI task, when the backend can start an append at once (``start_append``: the embedded API
    of the node that leads). Only the plain success path is claimed: a request with an
    Idempotency-Key, a missing or wrong token, a body that is not JSON or fails a check, or an
    append the backend cannot start here (this node does not lead) goes to the ASGI app, which
    gives the same answers as before. Once started, the append's outcome is answered here with
    the app's own messages (``Appender.unkeyed_failure``)."""

    def __init__(self, endpoint: AppendEndpoint, credentials: Credentials | None) -> None:
        self.endpoint = endpoint
        self.credentials = credentials
        self.max_body = min(MAX_DIRECT_BODY, endpoint.max_body_bytes)
        self.answered = 0  # requests answered here, not by the app (tests, diagnostics)

    def wants(self, scope: Scope) -> bool:
        if scope["method"] != "POST" or route_path(scope) != "/v1/records":
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
        if self.credentials is not None:  # a write credential, else the app answers 401/403
            token = bearer_token(authorization)
            identity = self.credentials.identify(token) if token is not None else None
            if identity is None or identity.scope < AuthScope.WRITE:
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
                status, payload = 200, append_json(result)
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
                status, payload = error.status, error_json(error.message)
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


def error_json(message: str) -> bytes:
    """``{"error": message}`` as ``error_response`` renders it (Starlette's JSONResponse)."""
    return json.dumps(
        {"error": message}, ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode("utf-8")
