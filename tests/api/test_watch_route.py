"""``GET /v1/watch`` over real HTTP: the router on a small FastAPI app served by uvicorn on
127.0.0.1 (port 0) in a thread, a real ``WatchHub`` fed by an in-memory committed log on the
server's loop, and the Server-Sent Events read off a plain asyncio connection (chunked
transfer decoding by hand). Events, ids, Last-Event-ID resumption, 410, 422, 503; a client
that disconnects frees its watcher, and closing the hub ends the stream."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from api.app import _ERRORS
from api.middleware import error_response
from api.models import ApiError
from api.server import ServerHandle, serve_in_thread
from api.values import describe_errors
from api.watch_route import watch_router
from kraft_spark.store.watch import BelowLogStart, WatchEvent, WatchHub

pytestmark = pytest.mark.timeout(60)


class MemoryLog:
    """The committed log the hub reads and is fed from: writes land at the next offset and
    are published to the hub at once, on the server's loop (``Served.write``)."""

    def __init__(self) -> None:
        self.start = 0
        self.end = 0
        self.snapshot: str | None = None
        self.writes: list[WatchEvent] = []
        self.hub: WatchHub | None = None

    def write(self, pairs: list[tuple[bytes, bytes | None]]) -> None:
        events = [WatchEvent(self.end + i, key, value) for i, (key, value) in enumerate(pairs)]
        self.writes.extend(events)
        self.end += len(events)
        if self.hub is not None:
            self.hub.publish(events, self.end)

    async def read(self, from_offset: int, max_events: int) -> tuple[list[WatchEvent], int]:
        if from_offset < self.start:
            raise BelowLogStart(from_offset, self.start, self.snapshot)
        first = bisect.bisect_left([e.offset for e in self.writes], from_offset)
        found = self.writes[first:first + max_events]
        return found, (found[-1].offset + 1 if len(found) == max_events else self.end)


@dataclass
class Served:
    handle: ServerHandle
    log: MemoryLog
    state: dict[str, Any]

    @property
    def port(self) -> int:
        return self.handle.port

    @property
    def hub(self) -> WatchHub:
        hub = self.state["hub"]
        assert isinstance(hub, WatchHub)
        return hub

    async def on_server(self, coro: Coroutine[Any, Any, None]) -> None:
        loop = self.state["loop"]
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    async def write(self, *pairs: tuple[str, bytes | None]) -> None:
        async def write() -> None:
            self.log.write([(k.encode(), v) for k, v in pairs])

        await self.on_server(write())

    async def close_hub(self) -> None:
        async def close() -> None:
            self.hub.close()

        await self.on_server(close())

    async def watchers_become(self, count: int, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            while self.hub.watchers != count:
                await asyncio.sleep(0.01)


def make_app(log: MemoryLog, state: dict[str, Any], *, serve_watches: bool = True,
             **hub_options: Any) -> FastAPI:
    """The router on an app with the sidecar's error handlers (``api.app.create_app``'s)."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state["loop"] = asyncio.get_running_loop()
        state["hub"] = log.hub = WatchHub(log.read, applied_offset=log.end, **hub_options)
        try:
            yield
        finally:
            log.hub.close()

    app = FastAPI(lifespan=lifespan)

    async def on_api_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.message, exc.headers)

    async def on_validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(422, f"invalid request: {describe_errors(list(exc.errors()))}")

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.include_router(watch_router(lambda: state.get("hub") if serve_watches else None,
                                    _ERRORS))
    return app


@pytest.fixture
def serve() -> Iterator[Any]:
    handles: list[tuple[ServerHandle, dict[str, Any]]] = []

    def start(log: MemoryLog | None = None, **options: Any) -> Served:
        log = log or MemoryLog()
        state: dict[str, Any] = {}
        handle = serve_in_thread(make_app(log, state, **options), graceful_shutdown_s=2)
        handles.append((handle, state))
        return Served(handle, log, state)

    try:
        yield start
    finally:
        for handle, state in handles:
            hub, loop = state.get("hub"), state.get("loop")
            if hub is not None and loop is not None and handle.running:
                loop.call_soon_threadsafe(hub.close)  # end the streams: no graceful wait
            handle.stop()


# --------------------------------------------------------------------------- an SSE client


@dataclass
class Sse:
    event: str
    id: str | None
    data: Any


@dataclass
class Stream:
    """One HTTP/1.1 GET on its own connection; for a 200, its SSE events one at a time."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    buffer: bytes = b""
    ended: bool = False

    def json(self) -> Any:
        return json.loads(self.body)

    async def next(self, timeout_s: float = 10.0) -> Sse | None:
        """The next event; None once the server ended the stream."""
        async with asyncio.timeout(timeout_s):
            while b"\n\n" not in self.buffer:
                if self.ended:
                    assert not self.buffer, self.buffer
                    return None
                size = int((await self.reader.readline()).strip(), 16)
                if size == 0:
                    assert await self.reader.readline() == b"\r\n"
                    self.ended = True
                    continue
                chunk = await self.reader.readexactly(size + 2)
                assert chunk.endswith(b"\r\n")
                self.buffer += chunk[:-2]
        block, self.buffer = self.buffer.split(b"\n\n", 1)
        fields: dict[str, str] = {}
        for line in block.decode().split("\n"):
            name, _, value = line.partition(": ")
            assert name not in fields, block
            fields[name] = value
        assert set(fields) <= {"event", "id", "data"}, block
        return Sse(fields["event"], fields.get("id"), json.loads(fields["data"]))

    async def events(self, count: int, *, skip_progress: bool = True) -> list[Sse]:
        out: list[Sse] = []
        while len(out) < count:
            event = await self.next()
            assert event is not None, f"the stream ended after {out}"
            if not (skip_progress and event.event == "progress"):
                out.append(event)
        return out

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


@contextlib.asynccontextmanager
async def get(port: int, params: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None,
              path: str = "/v1/watch") -> AsyncIterator[Stream]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    stream = Stream(reader, writer)
    try:
        target = f"{path}?{urlencode(params)}" if params is not None else path
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Accept: text/event-stream\r\n{extra}\r\n".encode())
        async with asyncio.timeout(10):
            status_line = await reader.readline()
            stream.status = int(status_line.split()[1])
            while (line := await reader.readline()) != b"\r\n":
                name, _, value = line.decode("latin-1").partition(":")
                stream.headers[name.strip().lower()] = value.strip()
            if "content-length" in stream.headers:
                stream.body = await reader.readexactly(int(stream.headers["content-length"]))
        yield stream
    finally:
        await stream.close()


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


# --------------------------------------------------------------------------- the stream


def test_writes_stream_as_events_with_their_offsets_as_ids(serve: Any) -> None:
    log = MemoryLog()
    log.write([(b"a", b'{"v":1}'), (b"b", b"2"), (b"a", None), (b"a", b"not json"),
               (b"ab", b"[1]")])
    served = serve(log)

    async def body() -> None:
        async with get(served.port, {"key": "a", "from_offset": 0}) as stream:
            assert stream.status == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            assert stream.headers["cache-control"] == "no-cache"
            assert stream.headers["x-accel-buffering"] == "no"
            assert stream.headers["transfer-encoding"] == "chunked"
            put, delete, text = await stream.events(3)
            assert (put.event, put.id, put.data) == (
                "put", "0", {"key": "a", "value": {"v": 1}, "offset": 0, "type": "put"})
            assert (delete.event, delete.id, delete.data) == (
                "delete", "2", {"key": "a", "value": None, "offset": 2, "type": "delete"})
            assert text.data["value"] == "not json"  # stored text that is not JSON
            progress = await stream.next()
            assert progress is not None
            assert (progress.event, progress.id, progress.data) == ("progress", "4",
                                                                    {"offset": 5})
            await served.write(("b", b"3"), ("a", b'"live"'))
            [live] = await stream.events(1)
            assert (live.id, live.data["value"]) == ("6", "live")
            assert served.hub.watchers == 1

    run(body())


def test_a_prefix_watch_from_now_starts_with_a_progress_and_gets_every_key_under_it(
    serve: Any,
) -> None:
    log = MemoryLog()
    log.write([(b"x", b"0")])
    served = serve(log)

    async def body() -> None:
        async with get(served.port, {"prefix": "t/"}) as under, \
                get(served.port, {"prefix": ""}) as everything:
            first = await under.next()
            assert first is not None and (first.event, first.data) == ("progress", {"offset": 1})
            await served.write(("t/é", b'{"n":1}'), ("u", b"1"), ("t/", b"2"))
            assert [(e.data["key"], e.id) for e in await under.events(2)] == [
                ("t/é", "1"), ("t/", "3")]
            assert [e.data["key"] for e in await everything.events(3)] == ["t/é", "u", "t/"]

    run(body())


def test_last_event_id_resumes_after_it_and_wins_over_from_offset(serve: Any) -> None:
    log = MemoryLog()
    log.write([(b"k", str(i).encode()) for i in range(6)])
    served = serve(log)

    async def body() -> None:
        async with get(served.port, {"key": "k", "from_offset": 0},
                       {"Last-Event-ID": "2"}) as stream:
            assert [e.id for e in await stream.events(3)] == ["3", "4", "5"]
        async with get(served.port, {"key": "k"}, {"Last-Event-ID": "4"}) as stream:
            assert [e.data["value"] for e in await stream.events(1)] == [5]

    run(body())


def test_the_deletes_of_one_offset_carry_ids_that_resume_between_them(serve: Any) -> None:
    log = MemoryLog()
    log.write([(b"svc/a", b"1"), (b"svc/b", b"1"), (b"svc/c", b"1")])
    # A lease revoked at offset 3 deletes its three keys there.
    deletes = [WatchEvent(3, key, None, i, i == 2)
               for i, key in enumerate((b"svc/a", b"svc/b", b"svc/c"))]
    log.writes.extend(deletes)
    log.end = 4
    log.write([(b"svc/d", b"2")])
    served = serve(log)

    async def body() -> None:
        async with get(served.port, {"prefix": "svc/", "from_offset": 0}) as stream:
            events = await stream.events(7)
            assert [(e.event, e.id) for e in events] == [
                ("put", "0"), ("put", "1"), ("put", "2"), ("delete", "3.0"),
                ("delete", "3.1"), ("delete", "3"), ("put", "4")]
            progress = await stream.next()
            assert progress is not None and (progress.event, progress.id) == ("progress", "4")
        async with get(served.port, {"prefix": "svc/"}, {"Last-Event-ID": "3.0"}) as stream:
            assert [(e.data["key"], e.id) for e in await stream.events(3)] == [
                ("svc/b", "3.1"), ("svc/c", "3"), ("svc/d", "4")]

    run(body())


def test_progress_events_while_nothing_matches(serve: Any) -> None:
    served = serve(progress_interval_s=0.1)

    async def body() -> None:
        async with get(served.port, {"key": "quiet"}) as stream:
            first = await stream.next()
            assert first is not None and first.data == {"offset": 0}
            await served.write(("loud", b"1"), ("loud", b"2"))
            offsets = [0]
            while offsets[-1] < 2:  # (a slow machine may send one more at 0 first)
                event = await stream.next()
                assert event is not None and event.event == "progress"
                offsets.append(event.data["offset"])
            assert offsets == sorted(offsets) and offsets[-1] == 2

    run(body())


# --------------------------------------------------------------------------- refusals


def test_below_the_log_start_is_410_naming_the_snapshot(serve: Any) -> None:
    log = MemoryLog()
    log.write([(b"k", b"1")] * 5)
    log.start, log.snapshot = 3, "3-2"
    served = serve(log)

    async def body() -> None:
        async with get(served.port, {"key": "k", "from_offset": 1}) as stream:
            assert stream.status == 410
            assert stream.headers["content-type"] == "application/json"
            reply = stream.json()
            assert reply["snapshot"] == "3-2" and reply["log_start_offset"] == 3
            assert "load snapshot 3-2 first" in reply["error"]
        async with get(served.port, {"key": "k"}, {"Last-Event-ID": "0"}) as stream:
            assert stream.status == 410
        assert served.hub.watchers == 0
        async with get(served.port, {"key": "k", "from_offset": 3}) as stream:
            assert [e.id for e in await stream.events(2)] == ["3", "4"]

    run(body())


@pytest.mark.parametrize(("params", "headers", "wording"), [
    ({}, {}, "exactly one of"),
    ({"key": "a", "prefix": "a"}, {}, "exactly one of"),
    ({"key": ""}, {}, "must not be empty"),
    ({"key": "a", "from_offset": -1}, {}, "from_offset"),
    ({"key": "a", "from_offset": "soon"}, {}, "from_offset"),
    ({"key": "a"}, {"Last-Event-ID": "x"}, "Last-Event-ID"),
    ({"key": "a"}, {"Last-Event-ID": "-1"}, "Last-Event-ID"),
    ({"key": "a"}, {"Last-Event-ID": "3.x"}, "N.M"),
], ids=["neither", "both", "empty-key", "negative", "not-a-number", "bad-id", "negative-id",
        "bad-index"])
def test_bad_requests_are_422_saying_what_to_fix(
    serve: Any, params: dict[str, Any], headers: dict[str, str], wording: str,
) -> None:
    served = serve()

    async def body() -> None:
        async with get(served.port, params, headers) as stream:
            assert stream.status == 422
            assert wording in stream.json()["error"]
        assert served.hub.watchers == 0

    run(body())


def test_an_app_without_watches_answers_503(serve: Any) -> None:
    served = serve(serve_watches=False)

    async def body() -> None:
        async with get(served.port, {"key": "a"}) as stream:
            assert stream.status == 503
            assert "serves no watches" in stream.json()["error"]

    run(body())


# --------------------------------------------------------------------------- endings


def test_a_client_that_disconnects_frees_its_watcher(serve: Any) -> None:
    log = MemoryLog()
    log.write([(b"k", b"1")] * 3)
    served = serve(log)

    async def body() -> None:
        async with get(served.port, {"key": "k"}) as idle, \
                get(served.port, {"prefix": "", "from_offset": 0}) as reading:
            assert (await idle.next()) is not None
            await reading.events(1)
            await served.watchers_become(2)
        await served.watchers_become(0)  # both closed their connection
        # The server still serves watches afterwards.
        async with get(served.port, {"key": "k"}) as again:
            assert (await again.next()) is not None
            assert served.hub.watchers == 1
        await served.watchers_become(0)

    run(body())


def test_closing_the_hub_ends_the_stream_with_a_cancelled_event(serve: Any) -> None:
    served = serve()

    async def body() -> None:
        async with get(served.port, {"key": "k"}) as stream:
            assert (await stream.next()) is not None
            await served.write(("k", b"1"))
            await stream.events(1)
            await served.close_hub()
            final = await stream.next()
            assert final is not None and final.event == "cancelled"
            assert final.data["resume_offset"] == 1 and final.data["resume_id"] == "0"
            assert "stopped serving watches" in final.data["reason"]
            assert await stream.next() is None  # the response is complete
        async with get(served.port, {"key": "k"}) as refused:
            assert refused.status == 503
            assert refused.headers["retry-after"] == "1"

    run(body())


def test_the_openapi_schema_documents_the_stream_and_its_errors() -> None:
    app = make_app(MemoryLog(), {})
    operation = app.openapi()["paths"]["/v1/watch"]["get"]
    assert "Server-Sent Events" in operation["summary"]
    assert "progress" in operation["description"] and "Last-Event-ID" in operation["description"]
    assert "text/event-stream" in operation["responses"]["200"]["content"]
    assert {"401", "410", "422", "503"} <= set(operation["responses"])
    names = {p["name"] for p in operation["parameters"]}
    assert names == {"key", "prefix", "from_offset", "Last-Event-ID"}
