"""Requests answered by a callback on uvicorn's protocol, with no ASGI task: the commit path.

uvicorn runs every request as a task through the ASGI call chain: a task and its first step on
the next loop iteration, the app's receive/send coroutines and their message dicts, and one
more wake-up when the append's future resolves. On the leader's single-client path that was
about 40 of 280 µs of the critical path (a timeline of wrk → leader → follower → leader, traced
with timestamps in all three processes): less than the work itself, but each step runs on a
cold cache after the process slept, so it costs several times its micro-benchmark.

A :class:`DirectHandler` found on the app (``app.direct_handler``) is offered every request
uvicorn is about to start. It claims the ones it can answer from a callback (``wants``, at the
headers), gets the complete body (``handle``) and calls ``answer`` once, now or later (when the
commit resolves). What it declines, or gives back at ``handle``, runs as an ordinary ASGI
request with the body already buffered, so the app's answer (errors included) stays the one
source of truth for everything but the success path.

uvicorn's own bookkeeping is kept: the request still has its ``RequestResponseCycle`` (so
pipelined requests queue behind it, shutdown sees it in flight, keep-alive is re-armed), only
the task that would have run the app is not started. Claimed requests are small
(``MAX_DIRECT_BODY``, under uvicorn's read-pause mark), so their body never waits on an app
reading it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, Protocol

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

log = logging.getLogger(__name__)

# Bodies larger than this take the ASGI path: uvicorn pauses reading past HIGH_WATER_LIMIT
# until the app takes the body, which a callback never does.
MAX_DIRECT_BODY: Final = HIGH_WATER_LIMIT

# (status, extra headers, body); the content-length and connection headers are added here.
Answer = Callable[[int, list[tuple[bytes, bytes]], bytes], None]


class DirectHandler(Protocol):
    def wants(self, scope: dict[str, Any]) -> bool:
        """At the request's headers: whether ``handle`` should see it (cheap; no I/O)."""

    def handle(self, scope: dict[str, Any], body: bytes, answer: Answer) -> bool:
        """The whole request: call ``answer`` exactly once (now or later) and return True, or
        return False without calling it to have the ASGI app answer instead. Must not raise
        once it has started anything it cannot take back."""


def find_direct_handler(app: Any) -> DirectHandler | None:
    """The handler of the app or of an app it wraps (uvicorn's wrappers keep ``.app``)."""
    for _ in range(8):
        handler = getattr(app, "direct_handler", None)
        if handler is not None:
            return handler  # type: ignore[no-any-return]
        app = getattr(app, "app", None)
        if app is None:
            break
    return None


class DirectHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol offering each request to the app's :class:`DirectHandler`
    before starting an ASGI task for it."""

    _direct: DirectHandler | None = None
    _claimed: RequestResponseCycle | None = None  # claimed; its body not complete yet

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._direct = find_direct_handler(self.app)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # Called at a request's headers, or when it leaves the pipeline behind another.
        direct = self._direct
        if (
            direct is not None
            and app is self.app  # not uvicorn's own "service unavailable" app
            and not cycle.waiting_for_100_continue
            and direct.wants(cycle.scope)  # type: ignore[arg-type]
        ):
            if cycle.more_body:
                self._claimed = cycle
            else:
                self._run(cycle, app)
            return
        super()._start_asgi_task(cycle, app)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        cycle = self._claimed
        if cycle is not None and cycle is self.cycle and not cycle.more_body:
            self._claimed = None
            self._run(cycle, self.app)

    def _run(self, cycle: RequestResponseCycle, app: Any) -> None:
        direct = self._direct
        assert direct is not None

        def answer(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
            self._answer(cycle, status, headers, body)

        try:
            taken = direct.handle(cycle.scope, bytes(cycle.body), answer)  # type: ignore[arg-type]
        except Exception:
            log.exception("the direct handler failed on %s %s", cycle.scope.get("method"),
                          cycle.scope.get("path"))
            answer(500, [(b"content-type", b"application/json")],
                   b'{"error":"internal error; see this server\'s log"}')
            return
        if not taken:
            super()._start_asgi_task(cycle, app)

    def _answer(
        self, cycle: RequestResponseCycle, status: int, headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> None:
        """What ``RequestResponseCycle.send`` does for a whole response, in one write."""
        if cycle.response_started or cycle.disconnected or self.transport.is_closing():
            return  # the client is gone (or the connection timed out meanwhile)
        cycle.response_started = True
        head = [STATUS_LINE[status]]
        for name, value in (*cycle.default_headers, *headers):
            head += (name, b": ", value, b"\r\n")
        head += (b"content-length: ", b"%d" % len(body), b"\r\n")
        if not cycle.keep_alive:
            head.append(b"connection: close\r\n")
        head += (b"\r\n", body)
        self.transport.write(b"".join(head))
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            self.transport.close()
        cycle.on_response()


__all__ = ["MAX_DIRECT_BODY", "Answer", "DirectHandler", "DirectHttpToolsProtocol",
           "find_direct_handler"]
