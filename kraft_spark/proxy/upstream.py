"""Kept-alive connections to one upstream HTTP server (the leader's own API, or the sidecar).

An ``Upstream`` pools idle connections to one address. ``UpstreamConnection.start`` writes one
encoded request and relays every byte of the answer to the client as it arrives, then calls
back once the answer is complete (or the connection failed). Callbacks, not coroutines: at one
connection an append's whole proxy cost is a few callbacks, no task or future per request.

A connection goes back to the pool only after a whole answer that keeps it alive; an idle one
is dropped after ``IDLE_S``, well before the server's own keep-alive timeout (uvicorn's 5 s),
so the proxy never writes on a connection the server is closing (a request lost that way could
not be told from one the server took).

Invariant: one upstream connection carries one request at a time, so every byte it sends
between a request and that request's completion belongs to that request's response.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Final, cast

from kraft_spark.proxy.messages import BadRequest, ResponseWatcher

IDLE_S: Final = 2.0
CONNECT_TIMEOUT_S: Final = 5.0


class UpstreamClosed(Exception):
    """The upstream connection ended before its answer was complete; ``answered``: some of
    the answer was already relayed to the client (so nothing can be said on top of it)."""

    def __init__(self, detail: str, *, answered: bool) -> None:
        super().__init__(detail)
        self.answered = answered


class Exchange:
    """What the client side is told about one request's answer."""

    def relay(self, data: bytes) -> None:
        raise NotImplementedError

    def completed(self, upstream: Upstream, conn: UpstreamConnection, keep_alive: bool) -> None:
        raise NotImplementedError

    def failed(self, upstream: Upstream, error: UpstreamClosed) -> None:
        raise NotImplementedError


class UpstreamConnection(asyncio.Protocol):
    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._exchange: Exchange | None = None
        self._watcher = ResponseWatcher()
        self._relayed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def start(self, request: bytes, exchange: Exchange, *, head: bool = False) -> None:
        """``head``: the request is a HEAD, whose answer has a head only."""
        assert self.transport is not None and self._exchange is None
        self._exchange, self._relayed = exchange, False
        self._watcher.expect(head=head)
        self.upstream.busy.add(self)
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        exchange, watcher = self._exchange, self._watcher
        if exchange is None:
            self.close()  # bytes nobody asked for: this connection cannot be trusted
            return
        try:
            complete = watcher.feed(data)
        except BadRequest as exc:
            self._fail(UpstreamClosed(exc.detail, answered=self._relayed))
            return
        exchange.relay(data)
        self._relayed = True
        if complete:
            self._exchange = None
            self.upstream.busy.discard(self)
            exchange.completed(self.upstream, self, watcher.keep_alive)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(UpstreamClosed(f"{self.upstream.address} closed the connection before "
                                  f"answering ({exc or 'EOF'})", answered=self._relayed))

    def _fail(self, error: UpstreamClosed) -> None:
        exchange, self._exchange = self._exchange, None
        self.upstream.busy.discard(self)
        self.close()
        if exchange is not None:
            exchange.failed(self.upstream, error)

    def abandon(self) -> None:
        """The client went away mid-answer: the rest of it must not reach anyone."""
        self._exchange = None
        self.upstream.busy.discard(self)
        self.close()

    def give_up(self, detail: str) -> None:
        """Fail the request in flight (the upstream stopped being the one to ask)."""
        self._fail(UpstreamClosed(detail, answered=self._relayed))

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Upstream:
    """One upstream address and its idle connections."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._idle: list[UpstreamConnection] = []
        self.busy: set[UpstreamConnection] = set()  # carrying a request now
        self.connects = 0  # for tests: how many connections were tried
        self._rest_until = 0.0

    def rest(self, seconds: float) -> None:
        """Not to be asked for ``seconds`` (it could not be reached)."""
        self._rest_until = time.monotonic() + seconds

    def resting(self) -> bool:
        return self._rest_until > 0 and time.monotonic() < self._rest_until

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def take_idle(self) -> UpstreamConnection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_S:
                return conn
            conn.close()
        return None

    async def connect(self) -> UpstreamConnection:
        """A new connection (raises OSError or TimeoutError)."""
        loop = asyncio.get_running_loop()
        self.connects += 1
        transport, conn = await asyncio.wait_for(
            loop.create_connection(lambda: UpstreamConnection(self), self.host, self.port),
            CONNECT_TIMEOUT_S)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def give_back(self, conn: UpstreamConnection, keep_alive: bool) -> None:
        if keep_alive and not conn.closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    def retire(self, grace_s: float) -> None:
        """This upstream is no longer the leader: its idle connections close now, and a
        request it has not answered within ``grace_s`` is given up (a deposed leader that is
        alive answers at once; a frozen one might never)."""
        self.close()
        if self.busy:
            asyncio.get_running_loop().call_later(grace_s, self._give_up_busy, grace_s)

    def _give_up_busy(self, grace_s: float) -> None:
        for conn in list(self.busy):
            conn.give_up(f"the leader changed and {self.address} did not answer within "
                         f"{grace_s:g} s")
