"""The server side of the Kafka-framed TCP transport: :class:`FrameServer` accepts
connections, splits each byte stream into frames of a maximum size, decodes the request header
and body, and hands them to a handler that answers later through its :class:`ServerConnection`
(see ``transport`` for the whole design and the client side)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import weakref
from collections.abc import Callable
from typing import Any, cast

from kraft_spark.net.principal import certificate_of, principal_of
from kraft_spark.net.sasl_server import SASL_KEYS, SaslGate
from kraft_spark.protocol import (
    ApiKey,
    ErrorCode,
    FrameDecoder,
    ProtocolError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    encode_response,
)
from kraft_spark.transport import (
    DEFAULT_MAX_FRAME_BYTES,
    FRAMES_PER_TURN,
    Body,
    api_versions_body,
)

log = logging.getLogger("kraft_spark.transport")


class ServerConnection:
    """One accepted connection; the handler answers through :meth:`respond`."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        # Kafka's principal: the client certificate's subject under mutual TLS, else anonymous
        # (connection_made runs after the TLS handshake, so the certificate is known here).
        self.principal = principal_of(transport)
        # Its DER bytes: a peer presenting the node's own certificate is one of the quorum's
        # nodes (net.produce_gate).
        self.certificate = certificate_of(transport)
        # False until SASL authentication succeeds on a SASL listener (net.sasl_server).
        self.authenticated = True
        self.sasl_mechanism: str | None = None
        self.closed = False
        self.last_read = 0.0  # loop time of the last bytes received (see FrameServer idle)

    def respond(self, api_key: int, api_version: int, correlation_id: int, body: Body) -> None:
        """Send a response (dropped silently if the connection is gone)."""
        if self.closed:
            return
        self.send_frame(encode_response(api_key, api_version, correlation_id, body))

    def send_frame(self, frame: bytes) -> None:
        """Send an already encoded response frame (dropped silently if the connection is
        gone, or going: a transport closing after the peer's EOF may not have reported its
        loss yet, and uvloop refuses writes to it)."""
        if not self.closed and not self._transport.is_closing():
            self._transport.write(frame)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._transport.close()


Handler = Callable[[ServerConnection, RequestHeader, Any], None]
RequestDecoder = Callable[[bytes], tuple[RequestHeader, Any]]


class _ServerProtocol(asyncio.Protocol):
    """One accepted connection's bytes, turned into requests from the transport's own callback:
    no stream reader and no task per connection, so a request reaches the handler in the
    callback that read it (the Fetch of every commit: one loop wake-up less on each side).

    Fairness: at most FRAMES_PER_TURN requests per callback; the rest wait, with reading
    paused, for the next loop turn. Backpressure: while the transport's write buffer is over
    its high-water mark (a client that does not read its responses), reading is paused too."""

    def __init__(self, server: FrameServer) -> None:
        self._server = server
        server._live.add(self)  # until connection_lost: see FrameServer.close
        self._conn: ServerConnection | None = None
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(server._max_frame_bytes)
        self._backlog: list[bytes] = []  # decoded frames waiting for the next turn
        self._writing_paused = False
        self._reading_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport, hence no isinstance).
        self._transport = cast(asyncio.Transport, transport)
        self._conn = self._server._accept(self._transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._live.discard(self)
        conn = self._conn
        if conn is not None:
            if exc is not None:
                log.debug("%s: %s: connection lost: %s", self._server._name, conn.peer, exc)
            conn.closed = True
            self._server._connections.discard(conn)
        self._backlog.clear()

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        if conn is None or conn.closed:
            return
        conn.last_read = asyncio.get_running_loop().time()
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            self._server._reject(conn, f"bad frame: {exc}")
            return
        if self._backlog:
            self._backlog.extend(frames)  # behind the ones already waiting for their turn
        else:
            self._dispatch_turn(frames)

    def _dispatch_turn(self, frames: list[bytes]) -> None:
        conn = self._conn
        assert conn is not None
        turn, rest = frames[:FRAMES_PER_TURN], frames[FRAMES_PER_TURN:]
        for payload in turn:
            if conn.closed or not self._server._dispatch(conn, payload):
                self._backlog.clear()
                return
        self._backlog = rest
        if rest:
            asyncio.get_running_loop().call_soon(self._next_turn)
        self._update_reading()

    def _next_turn(self) -> None:
        frames, self._backlog = self._backlog, []
        if self._conn is not None and not self._conn.closed:
            self._dispatch_turn(frames)

    def abort(self) -> None:
        """Drop the connection now, with whatever it still had to write."""
        if self._transport is not None:
            self._transport.abort()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        pause = self._writing_paused or bool(self._backlog)
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()


class FrameServer:
    """Accepts connections and dispatches decoded requests to ``handler``."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: Handler,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        name: str = "server",
        decode: RequestDecoder = decode_request,
        max_connections: int | None = None,
        idle_timeout_s: float | None = None,
        sasl_gate: SaslGate | None = None,
    ) -> None:
        """``decode`` turns a request payload into its header and what ``handler`` gets as
        the body; it raises as ``decode_request`` does (whose dict bodies it defaults to).

        ``max_connections``: connections beyond it are closed at once (Kafka's
        ``max.connections``); ``idle_timeout_s``: a connection that sent nothing for that long
        is closed (Kafka's ``connections.max.idle.ms``). Each connection costs a descriptor
        and up to a frame of buffer, so without them a peer opening thousands, or trickling
        bytes, could exhaust the process's descriptors or memory; None: no limit.

        ``sasl_gate``: what a connection must send before its requests reach ``handler``
        (SASL/PLAIN when the gate holds users; otherwise SASL requests are refused)."""
        self.host = host
        self._port = port
        self._handler = handler
        self._decode = decode
        self._ssl = ssl_context
        self._max_frame_bytes = max_frame_bytes
        self._name = name
        self._server: asyncio.Server | None = None
        self._connections: set[ServerConnection] = set()
        # Every protocol made and not yet lost, including a connection accepted as the server
        # closes (not yet in _connections) and one closing with unsent bytes: close() waits
        # for them, so no socket outlives the server.
        # Weak: a protocol whose TLS handshake failed never hears connection_lost.
        self._live: weakref.WeakSet[_ServerProtocol] = weakref.WeakSet()
        self._closing = False
        self.rejected = 0  # connections closed for bad input (a metric and a test hook)
        self._max_connections = max_connections
        self._idle_timeout_s = idle_timeout_s
        self._sweeper: asyncio.Task[None] | None = None
        self.refused_connections = 0  # over max_connections
        self.idle_closed = 0
        self._last_refusal_log = -1e9
        self._gate = sasl_gate if sasl_gate is not None else SaslGate(None, name)

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:
            port: int = self._server.sockets[0].getsockname()[1]
            return port
        return self._port

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._closing = False
        self._server = await loop.create_server(
            lambda: _ServerProtocol(self), self.host, self._port, ssl=self._ssl
        )
        if self._idle_timeout_s is not None:
            self._sweeper = asyncio.create_task(self._close_idle(self._idle_timeout_s))

    async def _close_idle(self, timeout_s: float) -> None:
        """Close connections that sent nothing for ``timeout_s``, checking 4 times per period
        (so one lives at most 1.25 x the timeout). A scan, not a timer per read: reads are the
        commit path."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(timeout_s / 4)
            cutoff = loop.time() - timeout_s
            for conn in [c for c in self._connections if c.last_read < cutoff]:
                self.idle_closed += 1
                log.info("%s: closing %s: nothing received for %.0f s", self._name, conn.peer,
                         timeout_s)
                conn.close()

    async def close(self) -> None:
        # From now on a connection accepted late (the kernel took it before the listener
        # closed; asyncio calls connection_made a turn later) is closed as it arrives: Python
        # 3.11's Server.close leaves accepted transports open, and such a one was never closed.
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._server is not None:
            await self._stop_accepting(self._server)
            self._server.close()
        for conn in list(self._connections):
            conn.close()
        self._connections.clear()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
        await self._release_sockets()

    @staticmethod
    async def _stop_accepting(server: asyncio.Server) -> None:
        """On asyncio's own loop, stop accepting a turn before the listener closes.

        Python 3.11 hands an accepted socket to a task that makes its transport a turn later;
        if Server.close ran in between, making the transport fails an assertion (the server
        has no sockets), the error is swallowed and the socket leaks (reproduced in
        tests/net/test_transport.py). Removing the listener's reader first (public loop API)
        and letting the tasks already created run avoids that window. uvloop accepts in libuv
        and has no such window."""
        loop = asyncio.get_running_loop()
        if not isinstance(loop, asyncio.SelectorEventLoop):
            return
        for sock in server.sockets:
            loop.remove_reader(sock.fileno())
        for _ in range(2):
            await asyncio.sleep(0)

    async def _release_sockets(self, grace_s: float = 0.5) -> None:
        """Wait until every connection this server accepted has released its socket.

        Python 3.11's Server.close leaves accepted transports alone, and two kinds outlive a
        plain close: a connection the kernel accepted just before the listener closed (asyncio
        hands it over in callbacks a few loop turns later; _accept then closes it, since
        _closing), and one whose peer does not read the bytes it still has to write (a
        transport closes only once its buffer is flushed). A loop stopping before either
        leaked the socket (CI runs 24 and 71). So: wait ``grace_s`` for them to finish, then
        abort what is left; the node is stopping, its unsent answers are lost either way."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        await asyncio.sleep(0)  # accept tasks already created make their protocols now
        while self._live and loop.time() < deadline:
            await asyncio.sleep(0.005)
        for protocol in list(self._live):
            protocol.abort()
        for _ in range(4):  # abort's connection_lost runs a turn later; it closes the socket
            if not self._live:
                break
            await asyncio.sleep(0)
        if self._live:
            log.warning("%s: %d connection(s) still open after close", self._name,
                        len(self._live))

    def _accept(self, transport: asyncio.Transport) -> ServerConnection:
        """A new connection: tracked, or closed at once when over ``max_connections``."""
        conn = ServerConnection(transport)
        conn.authenticated = not self._gate.required
        loop = asyncio.get_running_loop()
        conn.last_read = loop.time()
        if self._closing:
            conn.close()
        elif self._max_connections is not None and len(self._connections) >= self._max_connections:
            self._refuse_connection(conn, loop.time())
        else:
            self._connections.add(conn)
        return conn

    def _reject(self, conn: ServerConnection, why: str) -> None:
        self.rejected += 1
        log.warning("%s: closing connection from %s: %s", self._name, conn.peer, why)
        conn.close()

    def _refuse_connection(self, conn: ServerConnection, now: float) -> None:
        self.refused_connections += 1
        if now - self._last_refusal_log >= 10.0:  # a flood must not flood the log too
            self._last_refusal_log = now
            log.warning(
                "%s: refusing connections (%s the latest): %d open, the maximum "
                "(max.connections); %d refused so far",
                self._name, conn.peer, len(self._connections), self.refused_connections,
            )
        conn.close()

    def _dispatch(self, conn: ServerConnection, payload: bytes) -> bool:
        try:
            header, body = self._decode(payload)
        except UnsupportedVersionError as exc:
            if exc.api_key == ApiKey.API_VERSIONS and exc.correlation_id is not None:
                conn.respond(
                    ApiKey.API_VERSIONS,
                    0,
                    exc.correlation_id,
                    api_versions_body(ErrorCode.UNSUPPORTED_VERSION),
                )
                return True
            self._reject(conn, str(exc))
            return False
        except ProtocolError as exc:
            self._reject(conn, f"malformed request: {exc}")
            return False
        if header.api_key == ApiKey.API_VERSIONS:
            conn.respond(
                ApiKey.API_VERSIONS, header.api_version, header.correlation_id, api_versions_body()
            )
            return True
        if (not conn.authenticated or header.api_key in SASL_KEYS) and not self._gate.admit(
                conn, header, body):
            return not conn.closed
        try:
            self._handler(conn, header, body)
        except Exception:  # a bug in one request must not take the node down
            log.exception("%s: failed handling %s from %s", self._name, header, conn.peer)
            self._reject(conn, "internal error handling the request")
            return False
        return True
