"""``GET /v1/watch``: committed writes to a key, or to the keys under a prefix, as a
Server-Sent Events stream (``kraft_spark.store.watch`` does the watching; this is its HTTP
form). Mounted by ``app.include_router(watch_router(hub_provider, errors))``.

Each write is one event with a resumable ``id`` (``store.watch.event_id``: its offset, or
``offset.index`` for all but the last of the events one offset holds, as a lease's revocation
deleting three keys gives), so a client (a browser's ``EventSource`` does it by itself) resumes
after a disconnect with ``Last-Event-ID`` and gets every later write exactly once, even when it
stopped between the events of one offset; progress events carry the id to resume from too::

    event: put
    id: 42
    data: {"key":"topic/a","value":{"partitions":3},"offset":42,"type":"put"}

    event: delete
    id: 43.0
    data: {"key":"svc/a","value":null,"offset":43,"type":"delete"}

    event: delete
    id: 43
    data: {"key":"svc/b","value":null,"offset":43,"type":"delete"}

    event: progress
    id: 56
    data: {"offset":57}

    event: cancelled
    data: {"reason":"slow consumer: resume from ...","resume_offset":44,"resume_id":"43"}
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Annotated, Any, Final

from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.types import Receive, Scope, Send

from api.models import MAX_OFFSET, RETRY_AFTER_S, ApiError, ErrorResponse
from api.values import SERVE_JSON, value_json
from kraft_spark.store.service import WatchSource, WatchStream
from kraft_spark.store.watch import (
    BelowLogStart,
    Cancelled,
    Progress,
    WatchEvent,
    WatchHubClosed,
    WatchItem,
    event_id,
    parse_event_id,
    resume_id,
)

__all__ = ["EventStreamResponse", "encode_item", "watch_router"]

STREAM_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

DESCRIPTION: Final = """\
A [Server-Sent Events](https://html.spec.whatwg.org/multipage/server-sent-events.html) stream
(`text/event-stream`) of every committed write to `key`, or to the keys starting with `prefix`
(`prefix=` empty: every key), in offset order, each exactly once per stream. Give exactly one
of `key` and `prefix`.

Where it starts: at `from_offset` if given (the writes still in the log from there, then the
live ones), else from now on. A `Last-Event-ID` header (what `EventSource` sends when it
reconnects) resumes right after that event and takes precedence over `from_offset`.

Events:

* `put` and `delete`: `id` is the write's offset, or `offset.index` for each but the last of
  several events at one offset (a lease revoked or expired deletes all its keys at its offset:
  `43.0`, `43.1`, then `43`); `data` is `{"key": str, "value": <JSON, or the stored text when
  not JSON; null for a delete>, "offset": int, "type": "put"|"delete"}`.
* `progress`: `data` is `{"offset": N}`: every write below N has been reported (sent once the
  stream has caught up with the log, then whenever nothing matched for the progress interval,
  5 s by default). Its `id` resumes from there (none at offset 0), so a reconnect after a
  quiet spell starts where the stream stood, not at the last write's offset.
* `cancelled`, always last: `data` is `{"reason": str, "resume_offset": N, "resume_id": str
  or null}`. A consumer too slow to keep up (more writes pending than the watch may queue) is
  cut off this way, as are watches when the node stops or replaces its state with a leader's
  snapshot: reconnect with `Last-Event-ID: <resume_id>` (or from `resume_offset` when
  `resume_id` is null or names a whole offset; the reason says what to do first, if
  anything).

A `from_offset` below the log start is answered 410 before any event, naming the snapshot to
load first and the log start offset to watch from.
"""


class WatchGoneOut(BaseModel):
    error: str = Field(description="What went wrong and how to fix it.")
    snapshot: str | None = Field(
        description="The snapshot holding the state the deleted records led to, "
        "<end offset>-<epoch> (null: unknown)")
    log_start_offset: int = Field(description="The lowest offset a watch can start from.")


class EventStreamResponse(StreamingResponse):
    """A watch's event stream; the watcher is closed however the response ends (the stream
    finished, the client disconnected, or the server cancelled the request)."""

    media_type = "text/event-stream"

    def __init__(self, watcher: WatchStream) -> None:
        self._watcher = watcher
        self._events = _stream(watcher)
        super().__init__(self._events, headers=STREAM_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._watcher.aclose()
            await self._events.aclose()


async def _stream(watcher: WatchStream) -> AsyncGenerator[bytes]:
    try:
        async for item in watcher:
            yield encode_item(item)
    finally:
        await watcher.aclose()


def encode_item(item: WatchItem) -> bytes:
    """One SSE event (JSON keeps ``data`` on one line: it escapes CR and LF)."""
    if isinstance(item, WatchEvent):
        kind = "put" if item.value is not None else "delete"
        text = (f'{{"key":{SERVE_JSON(item.key.decode("utf-8", errors="replace"))},'
                f'"value":{value_json(item.value)},"offset":{item.offset},"type":"{kind}"}}')
        return f"event: {kind}\nid: {event_id(item)}\ndata: {text}\n\n".encode()
    if isinstance(item, Progress):
        last_id = resume_id(item.offset, item.index)
        id_line = f"id: {last_id}\n" if last_id is not None else ""
        return f'event: progress\n{id_line}data: {{"offset":{item.offset}}}\n\n'.encode()
    assert isinstance(item, Cancelled)
    text = SERVE_JSON({"reason": item.reason, "resume_offset": item.resume_offset,
                       "resume_id": resume_id(item.resume_offset, item.resume_index)})
    return f"event: cancelled\ndata: {text}\n\n".encode()


def _resume_point(last_event_id: str | None,
                  from_offset: int | None) -> tuple[int | None, int]:
    """Where the stream starts: ``(offset, events of that offset to skip)``."""
    if last_event_id is None or not last_event_id.strip():
        return from_offset, 0
    try:
        return parse_event_id(last_event_id, MAX_OFFSET)
    except ValueError as exc:
        raise ApiError(
            422, f"the Last-Event-ID header must be the id of an event of this stream: {exc}; "
            "resume with the last id received, or drop the header and give from_offset",
        ) from None


def watch_router(hub_provider: Callable[[], WatchSource | None],
                 errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    """``GET /v1/watch`` over the hub ``hub_provider()`` returns per request (None: this
    endpoint serves no watches, 503). ``errors``: the app's error responses for OpenAPI
    (``api.app._ERRORS``)."""
    router = APIRouter(tags=["watch"])
    responses: dict[int | str, dict[str, Any]] = {
        200: {"description": "The event stream (see above).",
              "content": {"text/event-stream": {"schema": {"type": "string"}, "example": (
                  'event: put\nid: 42\ndata: {"key":"topic/a","value":{"partitions":3},'
                  '"offset":42,"type":"put"}\n\n'
                  'event: progress\ndata: {"offset":43}\n\n')}}},
        410: {"model": WatchGoneOut,
              "description": "from_offset is below the log start: load the snapshot named, "
              "then watch from log_start_offset"},
        422: {**errors.get(422, {"model": ErrorResponse}),
              "description": "Not exactly one of key and prefix, or a bad from_offset or "
              "Last-Event-ID"},
        503: {"model": ErrorResponse,
              "description": "This endpoint serves no watches, or its node is stopping"},
    }
    for status in (401, 403):
        if status in errors:
            responses[status] = errors[status]

    @router.get(
        "/v1/watch",
        response_class=EventStreamResponse,
        status_code=200,
        responses=responses,
        summary="Watch a key or a prefix: committed writes as Server-Sent Events",
        description=DESCRIPTION,
    )
    async def watch(
        key: Annotated[str | None, Query(
            description="Watch this key (UTF-8).", examples=["topic/a"])] = None,
        prefix: Annotated[str | None, Query(
            description="Watch every key starting with this (empty: all keys).",
            examples=["topic/"])] = None,
        from_offset: Annotated[int | None, Query(
            ge=0, le=MAX_OFFSET,
            description="Start at this offset (default: from now on).")] = None,
        last_event_id: Annotated[str | None, Header(
            alias="Last-Event-ID",
            description="Resume after this event id (N or N.M); wins over from_offset.",
        )] = None,
    ) -> Response:
        hub = hub_provider()
        if hub is None:
            raise ApiError(
                503, "this endpoint holds no copy of the store's state, so it serves no watches "
                "(a node's own HTTP API and the Spark application's endpoint do): watch "
                "through one of those")
        if (key is None) == (prefix is None):
            raise ApiError(
                422, "give exactly one of the query parameters key (one key) and prefix (the "
                "keys starting with it; prefix= empty for every key)")
        if key == "":
            raise ApiError(422, "query parameter key must not be empty: to watch every key "
                                "give prefix= (empty) instead")
        start, skip = _resume_point(last_event_id, from_offset)
        try:
            watcher = hub.watch(
                key=None if key is None else key.encode("utf-8"),
                prefix=None if prefix is None else prefix.encode("utf-8"),
                from_offset=start, from_index=skip,
            )
        except WatchHubClosed as exc:
            raise ApiError(503, str(exc), {"Retry-After": RETRY_AFTER_S}) from None
        try:
            await watcher.start()
        except BelowLogStart as exc:
            return JSONResponse(
                {"error": str(exc), "snapshot": exc.snapshot,
                 "log_start_offset": exc.log_start_offset},
                status_code=410,
            )
        except BaseException:
            await watcher.aclose()
            raise
        return EventStreamResponse(watcher)

    return router
