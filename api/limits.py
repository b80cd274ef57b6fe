"""Connection limits for the HTTP listeners, which uvicorn does not enforce itself.

uvicorn keeps every accepted connection until the client closes it, except one that sits idle
after a response (its keep-alive timeout). A client that connects and sends nothing, or sends
its request line a byte at a time, holds a descriptor forever. In a node that reaches past
HTTP: measured before this module, 24,000 silent connections to a follower's embedded API filled
all 20,000 of its descriptors, and its Raft listener reset a ``metadata-quorum describe`` (a
peer reconnecting would fare the same; opening a log segment or writing the quorum state needs a
descriptor too). With the limits the follower held 1,020 descriptors and answered. So every
kraft-spark HTTP listener (the embedded API, the sidecar, the Spark application's) serves
through a :class:`ListenerLimits`:

* at most ``max_connections`` open connections (``kraft.http.max.connections``, like the Raft
  listener's ``max.connections``). One more is answered ``503`` with ``Connection: close`` and
  half-closed (its request read and dropped, so the client gets the 503 rather than a reset),
  then closed once the client closes or after ``REFUSED_LINGER_S``. uvicorn never sees it;
* a request's headers must arrive within ``header_timeout_s`` of the connection being made or
  of the request's first byte (``kraft.http.header.timeout.ms``; Go's ReadHeaderTimeout,
  nginx's client_header_timeout). A connection that never sent anything is closed; one in the
  middle of its headers is answered ``408`` and closed;
* the body then gets as long again, counting only the time the application spends waiting for
  it (``408`` and closed if the client is late).

The time the server itself takes is never counted: bytes that arrive while a request is being
answered (a pipelined request, the rest of a body uvicorn has not been asked for yet) start no
deadline. One sweep per listener every ``header_timeout_s / 4`` (at most every second) checks
the deadlines, so a connection may last up to a quarter longer.

How it sits on uvicorn, with no subclass of its protocols and none of their fields:

* :meth:`ListenerLimits.protocol_factory` wraps the factory of uvicorn's protocol in a plain
  ``asyncio.Protocol`` that counts connections, sees bytes arrive, and forwards every callback;
* :meth:`ListenerLimits.asgi` is an ASGI middleware that tells the connection when a request is
  in the application and when the application waits for the body. It finds the connection by
  the ASGI scope's ``client`` and ``server`` addresses (a TCP connection's four-tuple).

Refusals and timeouts are logged at most once per ``LOG_EVERY_S`` with their counts since the
last line, so a flood does not flood the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final, cast

from kraft_spark.net.config import DEFAULT_HTTP_HEADER_TIMEOUT_MS, DEFAULT_HTTP_MAX_CONNECTIONS

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS: Final = DEFAULT_HTTP_MAX_CONNECTIONS
DEFAULT_HEADER_TIMEOUT_S: Final = DEFAULT_HTTP_HEADER_TIMEOUT_MS / 1000
LOG_EVERY_S: Final = 10.0
# How long a refused connection stays half-closed, its input dropped, before it is closed.
REFUSED_LINGER_S: Final = 1.0
# At most this many at a time (per listener); beyond, a refused connection is closed at once.
MAX_LINGERING: Final = 64

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# (client host, client port), (server host, server port): one TCP connection.
Address = tuple[tuple[str, int], tuple[str, int]]


@dataclass(frozen=True)
class HttpLimits:
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be ≥ 1, got {self.max_connections}")
        if not self.header_timeout_s > 0:
            raise ValueError(f"header_timeout_s must be > 0, got {self.header_timeout_s}")


def _plain_response(status: int, reason: str, message: str, extra: str = "") -> bytes:
    """A complete HTTP/1.1 response in the API's error shape that closes the connection."""
    body = json.dumps({"error": message}).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n"
    ).encode("latin-1") + body


class _RateLimitedLog:
    """Counts occurrences; logs a warning with the count at most once per LOG_EVERY_S."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.count = 0
        self.logged_at = -LOG_EVERY_S

    def hit(self, *args: object) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.logged_at >= LOG_EVERY_S:
            log.warning(self.text + " (%d since the last such line)", *args, self.count)
            self.count = 0
            self.logged_at = now


def _address(peer: Any, local: Any) -> Address | None:
    """A connection's key as the ASGI scope gives it (``client``, ``server``): host and port
    only, also for IPv6 (whose socket addresses have four fields)."""
    try:
        return (str(peer[0]), int(peer[1])), (str(local[0]), int(local[1]))
    except (TypeError, IndexError, ValueError):
        return None  # a Unix socket, or no address: no limits for it


class ListenerLimits:
    """One listener's connection cap and deadlines: its count, sweep and logs are its own."""

    def __init__(self, limits: HttpLimits | None = None) -> None:
        self.limits = limits = limits or HttpLimits()
        self.refuse_body = _plain_response(
            503, "Service Unavailable",
            f"this server already holds its limit of {limits.max_connections} HTTP connections "
            "(kraft.http.max.connections): close idle connections or retry later",
            "retry-after: 1\r\n",
        )
        self.header_timeout_body = _plain_response(
            408, "Request Timeout",
            f"the request's headers did not arrive within {limits.header_timeout_s:g} s "
            "(kraft.http.header.timeout.ms)",
        )
        self.body_timeout_body = _plain_response(
            408, "Request Timeout",
            f"the request's body did not arrive within {limits.header_timeout_s:g} s of being "
            "asked for (kraft.http.header.timeout.ms)",
        )
        self.refused = _RateLimitedLog(
            "HTTP listener at its limit of %d connections (kraft.http.max.connections): "
            "refused new connections"
        )
        self.timed_out = _RateLimitedLog(
            "HTTP connections closed: request headers or body not complete within %g s "
            "(kraft.http.header.timeout.ms)"
        )
        # One sweep over the listener's connections per period, not a timer per request: the
        # commit path is short, and with a timer armed and cancelled per request it looked ~4 %
        # slower.
        self.period = min(1.0, limits.header_timeout_s / 4)
        self.open: set[_LimitedConnection] = set()  # served (not refused) connections
        self.by_address: dict[Address, _LimitedConnection] = {}
        self.lingering = 0  # refused connections half-closed right now
        self._sweeping = False

    def protocol_factory(
        self, serve: Callable[[], asyncio.Protocol]
    ) -> Callable[[], asyncio.Protocol]:
        """A factory whose connections are counted and timed, each one served by ``serve()``'s
        protocol unless it is refused."""
        return lambda: _LimitedConnection(self, serve)

    def asgi(self, app: ASGIApp) -> ASGIApp:
        """``app`` telling its connection when a request is in it and when it waits for the
        body. Serve the result on the listener whose protocols come from ``protocol_factory``."""
        by_address = self.by_address

        async def limited(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            try:
                conn = by_address.get((scope["client"], scope["server"]))
            except (KeyError, TypeError):  # no address, or one given as lists
                conn = None
            if conn is None:
                await app(scope, receive, send)
                return
            conn.request_started()
            try:
                await app(scope, conn.timed_receive(receive), conn.tracked_send(send))
            finally:
                conn.request_finished()

        return limited

    def close_all(self) -> None:
        """Close every connection still open (after a server's graceful shutdown ran out)."""
        for conn in list(self.open):
            if conn.transport is not None:
                conn.transport.close()

    def watch(self, conn: _LimitedConnection, loop: asyncio.AbstractEventLoop) -> None:
        self.open.add(conn)
        if not self._sweeping:
            self._sweeping = True
            loop.call_later(self.period, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            now = loop.time()
            for conn in list(self.open):
                if 0 < conn.due <= now:
                    try:
                        conn.overdue()
                    except Exception:  # one connection's trouble must not end the sweeps
                        log.exception("HTTP request timeout: closing a connection failed")
        finally:
            if self.open:
                loop.call_later(self.period, self._sweep, loop)
            else:
                self._sweeping = False


class _LimitedConnection(asyncio.Protocol):
    """One accepted connection: refused, or served by the inner protocol with its deadlines.

    ``due`` is the loop time by which the client owes bytes (0: nothing owed). It is set only
    while no request is in the application (the headers) or while the application waits for the
    body; the server's own time (computing an answer, a pipelined request queued behind it)
    never counts."""

    def __init__(self, listener: ListenerLimits, serve: Callable[[], asyncio.Protocol]) -> None:
        self.listener = listener
        self._serve = serve
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.address: Address | None = None
        self.due = 0.0
        self.begun = False  # bytes of a request arrived while none was in the application
        self.in_flight = False
        self.awaiting_body = False
        self.body_done = False
        self.body_budget = 0.0  # seconds the application may still wait for this body
        self.responded = False
        self._linger: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's does not subclass asyncio.Transport, hence no check).
        transport = cast(asyncio.Transport, transport)
        listener = self.listener
        self.transport = transport
        self.loop = loop = asyncio.get_running_loop()
        if len(listener.open) >= listener.limits.max_connections:
            self._refuse(transport, loop)
            return
        self.due = loop.time() + listener.limits.header_timeout_s
        listener.watch(self, loop)
        self.address = _address(transport.get_extra_info("peername"),
                                transport.get_extra_info("sockname"))
        if self.address is not None and self.address not in listener.by_address:
            listener.by_address[self.address] = self
        self.inner = self._serve()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        inner = self.inner
        if inner is None:
            return  # refused: what it sends is dropped
        if not self.begun and not self.in_flight:
            self.begun = True
            if not self.due:  # else the deadline counts from the connection's start
                assert self.loop is not None
                self.due = self.loop.time() + self.listener.limits.header_timeout_s
        inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        listener = self.listener
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
            listener.lingering -= 1
        listener.open.discard(self)
        if self.address is not None and listener.by_address.get(self.address) is self:
            del listener.by_address[self.address]
        self.due = 0.0
        if self.inner is not None:
            self.inner.connection_lost(exc)

    # -- the request's phases, told by ListenerLimits.asgi ------------------------------------

    def request_started(self) -> None:
        self.in_flight = True
        self.due = 0.0
        self.begun = self.body_done = self.responded = False
        self.body_budget = self.listener.limits.header_timeout_s

    def request_finished(self) -> None:
        self.in_flight = self.awaiting_body = False
        self.due = 0.0

    def timed_receive(self, receive: Receive) -> Receive:
        async def timed() -> Message:
            if self.body_done:  # a wait for the disconnect, not for the client's bytes
                return await receive()
            loop = self.loop
            assert loop is not None
            started = loop.time()
            # The budget spans the waits: a body trickled a byte per wait still runs out.
            self.due = started + max(self.body_budget, 1e-3)
            self.awaiting_body = True
            try:
                message = await receive()
            finally:
                self.due = 0.0
                self.awaiting_body = False
                self.body_budget -= loop.time() - started
            if message["type"] != "http.request" or not message.get("more_body", False):
                self.body_done = True
            return message

        return timed

    def tracked_send(self, send: Send) -> Send:
        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.responded = True
            await send(message)

        return tracked

    # -- limits ------------------------------------------------------------------------------

    def _refuse(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        """503, then half-close: a client sends its request right after connecting, and
        closing outright would answer that request with a reset, which discards the 503 in the
        client's buffer (a POST client then cannot tell whether it was processed). What the
        client sends is read and dropped until it closes, or REFUSED_LINGER_S."""
        listener = self.listener
        listener.refused.hit(listener.limits.max_connections)
        transport.write(listener.refuse_body)
        # Bounded, so that a flood of connections cannot hold descriptors this way either.
        if transport.can_write_eof() and listener.lingering < MAX_LINGERING:
            transport.write_eof()
            listener.lingering += 1
            self._linger = loop.call_later(REFUSED_LINGER_S, transport.close)
        else:
            transport.close()

    def overdue(self) -> None:
        """The client is late with its headers or its body: answer 408 (if a request had
        begun and nothing was answered yet) and close."""
        transport = self.transport
        self.due = 0.0
        if transport is None or transport.is_closing():
            return
        if self.awaiting_body:
            # The application wakes on the disconnect (uvicorn tells it once the connection is
            # lost) and cannot answer after this.
            answer = None if self.responded else self.listener.body_timeout_body
        elif self.in_flight:
            return  # the server's time: never a deadline (not reached: due is 0 then)
        else:
            answer = self.listener.header_timeout_body if self.begun else None
        self.listener.timed_out.hit(self.listener.limits.header_timeout_s)
        if answer is not None:
            transport.write(answer)
        transport.close()


__all__ = [
    "DEFAULT_HEADER_TIMEOUT_S", "DEFAULT_MAX_CONNECTIONS", "HttpLimits", "ListenerLimits",
]
