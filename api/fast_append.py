"""POST /v1/records without FastAPI's per-request work: the append endpoint and the fast-append
middleware that answers the same requests in ASGI, on uvicorn's public interface (an ASGI
app). Answers are byte for byte those of the app's route (tests/api compare them).

There is one way in for an append: this middleware. An earlier path answered plain appends from
uvicorn's protocol callbacks with no ASGI task, by overriding a private method of uvicorn's
protocol; removing it cost the leader's own API 10 % of its one-connection throughput and
26-30 % at 16 and 256 connections (bench/results/compare-20261128-041038.md against
compare-20261128-042429.md, the same machine one after the other), while the application's
address stayed 1.07x / 1.31x / 1.74x etcd's at 1 / 16 / 256 connections."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from api.appends import (
    Appender,
)
from api.conditional import judge, no_store_error, parse_conditional, with_conditions
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
from kraft_spark.client.types import (
    AppendRecord,
    AppendResult,
)
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
