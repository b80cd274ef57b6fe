"""Connection limits for the HTTP listeners, which uvicorn does not enforce itself.

uvicorn 0.54 keeps every accepted connection until the client closes it, except one that sits
idle after a response (its keep-alive timeout). A client that connects and sends nothing, or
sends its request line a byte at a time, holds a descriptor forever. In a node that reaches past
HTTP: measured before this module, 24,000 silent connections to a follower's embedded API filled
all 20,000 of its descriptors, and its Raft listener reset a ``metadata-quorum describe`` (a
peer reconnecting would fare the same; opening a log segment or writing the quorum state needs a
descriptor too). With the limits the follower held 1,020 descriptors and answered. So every
kraft-spark HTTP listener (the embedded API, the sidecar, the Spark application's) serves
through :func:`limited_protocol`:

* at most ``max_connections`` open connections (``kraft.http.max.connections``, like the Raft
  listener's ``max.connections``). One more is answered ``503`` with ``Connection: close`` and
  half-closed (its request read and dropped, so the client gets the 503 rather than a reset),
  then closed once the client closes or after ``REFUSED_LINGER_S``;
* a request's headers must arrive within ``header_timeout_s`` of the connection being made or
  of the request's first byte (``kraft.http.header.timeout.ms``; Go's ReadHeaderTimeout,
  nginx's client_header_timeout). One sweep per listener every ``header_timeout_s / 4`` (at
  most every second) checks it, so a connection may last up to a quarter longer. A connection
  that never sent anything is closed; one in the middle of its headers is answered ``408`` and
  closed. The body then gets as long again after the headers (408 and closed if it is late).
  A pipelined request waiting behind a response still being computed is not timed out, nor a
  body uvicorn stopped reading until the app takes what is buffered: the wait is this
  server's, not the client's.

Refusals and timeouts are logged at most once per ``LOG_EVERY_S`` with their counts since the
last line, so a flood does not flood the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from kraft_spark.net.config import DEFAULT_HTTP_HEADER_TIMEOUT_MS, DEFAULT_HTTP_MAX_CONNECTIONS

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS: Final = DEFAULT_HTTP_MAX_CONNECTIONS
DEFAULT_HEADER_TIMEOUT_S: Final = DEFAULT_HTTP_HEADER_TIMEOUT_MS / 1000
LOG_EVERY_S: Final = 10.0
# How long a refused connection stays half-closed, its input dropped, before it is closed.
REFUSED_LINGER_S: Final = 1.0
# At most this many at a time (per listener); beyond, a refused connection is closed at once.
MAX_LINGERING: Final = 64


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


def limited_protocol(limits: HttpLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with ``limits`` applied; pass it as ``uvicorn.Config(http=)``
    (see :func:`uvicorn_options`). One class per listener: its sweep and counts are its own."""
    refuse_body = _plain_response(
        503, "Service Unavailable",
        f"this server already holds its limit of {limits.max_connections} HTTP connections "
        "(kraft.http.max.connections): close idle connections or retry later",
        "retry-after: 1\r\n",
    )
    timeout_body = _plain_response(
        408, "Request Timeout",
        f"the request's headers did not arrive within {limits.header_timeout_s:g} s "
        "(kraft.http.header.timeout.ms)",
    )
    body_timeout_body = _plain_response(
        408, "Request Timeout",
        f"the request's body did not arrive within {limits.header_timeout_s:g} s of its headers "
        "(kraft.http.header.timeout.ms)",
    )

    # One sweep over the listener's connections per period, not a timer per request: the commit
    # path is short, and with a timer armed and cancelled per request it looked ~4 % slower.
    period = min(1.0, limits.header_timeout_s / 4)

    class LimitedHttpToolsProtocol(HttpToolsProtocol):
        refused = _RateLimitedLog(
            "HTTP listener at its limit of %d connections (kraft.http.max.connections): "
            "refused new connections"
        )
        timed_out = _RateLimitedLog(
            "HTTP connections closed: request headers or body not complete within %g s "
            "(kraft.http.header.timeout.ms)"
        )
        _sweeping = False  # per listener (class); a sweep is scheduled while it has connections
        # loop.time() by which the request's headers, or once they are in (``_awaiting_body``)
        # its body, must be complete; 0: nothing due. HTTP/1.1 parses one request after the
        # other, so one deadline covers both.
        _due = 0.0
        _awaiting_body = False
        _request_begun = False
        _refused = False
        _linger: asyncio.TimerHandle | None = None
        _lingering = 0  # per listener (class): refused connections half-closed right now

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            # Refused connections still lingering are in uvicorn's set but hold no slot.
            full = len(self.connections) - type(self)._lingering >= limits.max_connections
            super().connection_made(transport)
            if full:
                self._refuse(transport)
                return
            self._due = self.loop.time() + limits.header_timeout_s
            cls = type(self)
            if not cls._sweeping:
                cls._sweeping = True
                self.loop.call_later(period, cls._sweep, self.loop, self.connections)

        def _refuse(self, transport: asyncio.Transport) -> None:
            """503, then half-close: a client sends its request right after connecting, and
            closing outright would answer that request with a reset, which discards the 503 in
            the client's buffer (a POST client then cannot tell whether it was processed).
            What the client sends is read and dropped until it closes, or REFUSED_LINGER_S."""
            self.refused.hit(limits.max_connections)
            self._refused = True
            transport.write(refuse_body)
            cls = type(self)
            # Bounded, so that a flood of connections cannot hold descriptors this way either.
            if transport.can_write_eof() and cls._lingering < MAX_LINGERING:
                transport.write_eof()
                cls._lingering += 1
                self._linger = self.loop.call_later(REFUSED_LINGER_S, transport.close)
            else:
                transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
                type(self)._lingering -= 1
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused or self.transport.is_closing():
                return  # refused or timed out: nothing more is read
            super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._request_begun = True
            if not self._due:  # else the deadline counts from the connection's start
                self._due = self.loop.time() + limits.header_timeout_s

        def on_headers_complete(self) -> None:
            self._request_begun = False
            super().on_headers_complete()
            # The body gets as long again (on_message_complete ends it; at once without one).
            self._due = self.loop.time() + limits.header_timeout_s
            self._awaiting_body = True

        def on_message_complete(self) -> None:
            self._due = 0.0
            self._awaiting_body = False
            super().on_message_complete()

        @classmethod
        def _sweep(cls, loop: asyncio.AbstractEventLoop, connections: set[Any]) -> None:
            try:
                now = loop.time()
                for conn in list(connections):
                    if isinstance(conn, cls) and 0 < conn._due <= now:
                        try:
                            conn._overdue(now)
                        except Exception:  # one connection's trouble must not end the sweeps
                            log.exception("HTTP request timeout: closing a connection failed")
            finally:
                if connections:
                    loop.call_later(period, cls._sweep, loop, connections)
                else:
                    cls._sweeping = False

        def _overdue(self, now: float) -> None:
            """The request's headers or body are late: answer 408 (if a request had begun and
            nothing was answered yet) and close, unless the wait is this server's."""
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if self._awaiting_body:
                # uvicorn stopped reading until the app takes what is buffered.
                ours = self.flow.read_paused
                # The app waits for the body and wakes only on connection_lost, which marks
                # the cycle disconnected first: no answer of its own follows this one.
                answer = body_timeout_body if cycle is not None and not cycle.response_started \
                    else None
            else:
                # The client pipelined this request behind one we are still answering (uvicorn
                # may have paused reading meanwhile).
                ours = cycle is not None and not cycle.response_complete
                answer = timeout_body if self._request_begun else None
            if ours:
                self._due = now + limits.header_timeout_s
                return
            self._due = 0.0
            self.timed_out.hit(limits.header_timeout_s)
            if answer is not None:
                self.transport.write(answer)
            self.transport.close()

    return LimitedHttpToolsProtocol


def uvicorn_options(limits: HttpLimits | None) -> dict[str, Any]:
    """The ``uvicorn.Config`` options every kraft-spark HTTP listener takes: ``limits`` (the
    defaults if None), and no proxy-headers layer (nothing reads the client's address)."""
    return {"http": limited_protocol(limits or HttpLimits()), "proxy_headers": False}


__all__ = [
    "DEFAULT_HEADER_TIMEOUT_S", "DEFAULT_MAX_CONNECTIONS", "HttpLimits", "limited_protocol",
    "uvicorn_options",
]
