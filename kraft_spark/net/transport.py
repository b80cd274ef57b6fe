"""TCP transport for Kafka-framed requests: a server side and a pipelining client side.

Server: :class:`FrameServer` accepts connections, splits each byte stream into frames with a
maximum size, decodes the request header and body, and hands them to a handler that answers
later (possibly out of order: responses carry the correlation id, and every client of this
project matches on it). Bad bytes close only that connection: an oversized or malformed frame,
an unknown API or version. ApiVersions with a version we do not speak is answered with
UNSUPPORTED_VERSION at v0 (as Kafka does) so clients can downgrade.

Client: :class:`Connection` keeps one TCP connection with several requests in flight, matched
by correlation id, each with its own timeout. When the connection drops, every pending request
fails with :class:`TransportError` and the next request reconnects, no sooner than the backoff.
A connection attempt that the peer's host actively refused (``ECONNREFUSED``: nothing listens on
the port, so the peer process is gone) fails with ``TransportError.refused`` set; a timeout, a
reset or any other error never sets it.

Both sides are ``asyncio.Protocol`` objects, not streams: a request is decoded and handed to
the handler, and an answer matched to its request, inside the transport's read callback. With
a stream reader each message also cost a task wake-up, the reader's Python buffering and a
``drain`` per read; on a 1-client commit (one Fetch answer into a follower and its next Fetch
into the leader) that was 9 % of the leader's CPU per commit and 15 % of a follower's. The
server keeps what the streams gave: FRAMES_PER_TURN requests per callback (reading paused
until the next loop turn for the rest) and backpressure (reading paused while the answers
wait in the transport's buffer above its high-water mark).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import itertools
import logging
import re
import ssl
from collections.abc import Callable
from typing import Any, TypeVar, cast

from kraft_spark.protocol import (
    ApiKey,
    ErrorCode,
    FrameDecoder,
    ProtocolError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    supported_api_versions,
)

log = logging.getLogger(__name__)

Body = dict[str, Any]
DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024
# How an HTTP server's answer starts (to a Kafka frame it could not parse).
HTTP_HEAD = b"HTTP/"
# Requests of one read handled before the loop runs anything else. One read can hold thousands
# of small pipelined requests (a 256 KiB read of DescribeQuorums is ~5,800); handling them in
# one go blocked a leader's loop past the fetch timeout and cost it its leadership.
FRAMES_PER_TURN = 64


class TransportError(Exception):
    """The connection failed, closed, or a request timed out. ``sent`` tells whether the
    request may have reached the peer (False: it certainly did not). ``refused`` is True only
    when connecting was actively refused (nothing listens at the endpoint); it implies
    ``sent`` is False. ``not_kafka`` is True when the peer answered in HTTP: the endpoint is
    some HTTP server (an API port given for a Raft one), which will never take the request."""

    def __init__(self, message: str, *, sent: bool = True, refused: bool = False,
                 not_kafka: bool = False) -> None:
        super().__init__(message)
        self.sent = sent and not refused and not not_kafka
        self.refused = refused
        self.not_kafka = not_kafka


_ERRNO = re.compile(r"\[Errno (\d+)\]")


def is_connection_refused(exc: BaseException) -> bool:
    """True when a connect attempt was definitely refused (``ECONNREFUSED``).

    With several addresses for one host name, Python 3.11's ``open_connection`` raises a plain
    ``OSError("Multiple exceptions: ...")`` listing each attempt; that counts only when every
    listed attempt was refused. Anything else (timeouts, unreachable hosts, TLS errors) is not a
    refusal."""
    if isinstance(exc, ConnectionRefusedError):
        return True
    if not isinstance(exc, OSError) or isinstance(exc, TimeoutError | ssl.SSLError):
        return False
    if exc.errno is not None:
        return exc.errno == errno.ECONNREFUSED
    text = str(exc)
    if not text.startswith("Multiple exceptions:"):
        return False
    codes = _ERRNO.findall(text)
    return bool(codes) and all(int(code) == errno.ECONNREFUSED for code in codes)


def api_versions_body(error: int = 0) -> Body:
    return {
        "error_code": error,
        "api_keys": supported_api_versions(),
        "throttle_time_ms": 0,
    }


# ============================================================================ server side


class ServerConnection:
    """One accepted connection; the handler answers through :meth:`respond`."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
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
    ) -> None:
        """``decode`` turns a request payload into its header and what ``handler`` gets as
        the body; it raises as ``decode_request`` does (whose dict bodies it defaults to).

        ``max_connections``: connections beyond it are closed at once (Kafka's
        ``max.connections``); ``idle_timeout_s``: a connection that sent nothing for that long
        is closed (Kafka's ``connections.max.idle.ms``). Each connection costs a descriptor
        and up to a frame of buffer, so without them a peer opening thousands, or trickling
        bytes, could exhaust the process's descriptors or memory; None: no limit."""
        self.host = host
        self._port = port
        self._handler = handler
        self._decode = decode
        self._ssl = ssl_context
        self._max_frame_bytes = max_frame_bytes
        self._name = name
        self._server: asyncio.Server | None = None
        self._connections: set[ServerConnection] = set()
        self.rejected = 0  # connections closed for bad input (a metric and a test hook)
        self._max_connections = max_connections
        self._idle_timeout_s = idle_timeout_s
        self._sweeper: asyncio.Task[None] | None = None
        self.refused_connections = 0  # over max_connections
        self.idle_closed = 0
        self._last_refusal_log = -1e9

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:
            port: int = self._server.sockets[0].getsockname()[1]
            return port
        return self._port

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
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
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.close()
        self._connections.clear()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    def _accept(self, transport: asyncio.Transport) -> ServerConnection:
        """A new connection: tracked, or closed at once when over ``max_connections``."""
        conn = ServerConnection(transport)
        loop = asyncio.get_running_loop()
        conn.last_read = loop.time()
        if self._max_connections is not None and len(self._connections) >= self._max_connections:
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
        try:
            self._handler(conn, header, body)
        except Exception:  # a bug in one request must not take the node down
            log.exception("%s: failed handling %s from %s", self._name, header, conn.peer)
            self._reject(conn, "internal error handling the request")
            return False
        return True


# ============================================================================ client side

T = TypeVar("T")
Encode = Callable[[int, str], bytes]  # (correlation id, client id) -> the whole frame


class _Pending:
    """A request sent and not yet answered."""

    __slots__ = ("api_key", "decode", "done", "timeout_s", "timer")

    def __init__(self, api_key: int, decode: Callable[[bytes], Any],
                 done: Callable[[Any, BaseException | None], None],
                 timer: asyncio.TimerHandle, timeout_s: float) -> None:
        self.api_key = api_key
        self.decode = decode
        self.done = done
        self.timer = timer
        self.timeout_s = timeout_s


class Connection:
    """A client connection with pipelined requests (matched by correlation id)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        client_id: str = "kraft-spark",
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        connect_timeout_s: float = 2.0,
        reconnect_backoff_s: float = 0.05,
        reconnect_backoff_max_s: float = 1.0,
        fail_fast_when_refused: bool = False,
    ) -> None:
        """``fail_fast_when_refused``: while waiting out the reconnect backoff after a refused
        attempt, fail new requests at once with ``refused`` instead of holding them until the
        next attempt. For callers with their own retry policy (the Raft shell): the peer was
        not listening a moment ago, and holding the request only delays what the caller learns.
        Clients that loop over endpoints keep the default, which paces them."""
        self.host = host
        self.port = port
        self._ssl = ssl_context
        self._client_id = client_id
        self._max_frame_bytes = max_frame_bytes
        self._connect_timeout_s = connect_timeout_s
        self._backoff_min = reconnect_backoff_s
        self._backoff_max = reconnect_backoff_max_s
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._transport: asyncio.Transport | None = None
        self._protocol: _ClientProtocol | None = None
        self._pending: dict[int, _Pending] = {}
        self._connect_tasks: set[asyncio.Task[None]] = set()
        self._corr = itertools.count(1)
        self._connecting: asyncio.Future[None] | None = None
        self._last_refused = False  # the last connection attempt was refused
        self._fail_fast_when_refused = fail_fast_when_refused
        self._closed = False

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def _ensure_connected(self) -> asyncio.Transport:
        if self._closed:
            raise TransportError(f"connection to {self.endpoint} is closed", sent=False)
        if self._transport is not None and not self._transport.is_closing():
            return self._transport
        if self._connecting is not None:
            await asyncio.shield(self._connecting)
            if self._transport is None or self._transport.is_closing():
                # Never made, or lost again before this waiter ran.
                raise TransportError(
                    f"cannot connect to {self.endpoint}", sent=False, refused=self._last_refused
                )
            return self._transport
        loop = asyncio.get_running_loop()
        wait = self._next_attempt - loop.time()
        if wait > 0 and self._last_refused and self._fail_fast_when_refused:
            raise TransportError(
                f"cannot connect to {self.endpoint}: refused; next attempt in {wait:.3f} s",
                sent=False,
                refused=True,
            )
        self._connecting = loop.create_future()
        try:
            wait = self._next_attempt - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                transport, protocol = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: _ClientProtocol(self), self.host, self.port, ssl=self._ssl
                    ),
                    self._connect_timeout_s,
                )
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                self._backoff = min(
                    self._backoff_max, max(self._backoff_min, self._backoff * 2)
                )
                self._next_attempt = loop.time() + self._backoff
                self._last_refused = is_connection_refused(exc)
                raise TransportError(
                    f"cannot connect to {self.endpoint}: {exc}",
                    sent=False,
                    refused=self._last_refused,
                ) from exc
            self._backoff = 0.0
            self._last_refused = False
            self._transport, self._protocol = transport, protocol
            return self._transport
        finally:
            fut, self._connecting = self._connecting, None
            if fut is not None and not fut.done():
                fut.set_result(None)

    def start_request(
        self,
        api_key: int,
        encode: Encode,
        decode: Callable[[bytes], T],
        timeout_s: float,
        done: Callable[[T | None, BaseException | None], None],
    ) -> None:
        """Send one request without a task of its own: ``encode(correlation_id, client_id)``
        makes the frame, ``decode(payload)`` reads the response, and ``done(result, None)`` or
        ``done(None, error)`` is called exactly once, from the loop: a ``TransportError`` when
        the request cannot be sent, times out, or its connection drops; whatever ``decode``
        raises otherwise (its ``ProtocolError`` becomes a ``TransportError``). Raises only what
        ``encode`` raises, before anything is sent.

        On a live connection this costs no loop iteration before the write and none between
        the response and ``done`` (``request`` pays a task switch on each side); a connection
        being made first is awaited in a task."""
        transport = self._transport
        if transport is None or transport.is_closing() or self._closed:
            send = functools.partial(self._write, api_key=api_key, encode=encode,
                                     decode=decode, timeout_s=timeout_s, done=done)
            task = asyncio.get_running_loop().create_task(self._connect_then_send(send, done))
            self._connect_tasks.add(task)
            task.add_done_callback(self._connect_tasks.discard)
            return
        self._write(transport, api_key=api_key, encode=encode, decode=decode,
                    timeout_s=timeout_s, done=done)

    async def _connect_then_send(
        self,
        send: Callable[[asyncio.Transport], None],
        done: Callable[[Any, BaseException | None], None],
    ) -> None:
        """``send`` (``_write`` with its request bound) once connected; ``done`` gets any
        error instead."""
        try:
            transport = await self._ensure_connected()
        except TransportError as exc:
            _call(done, None, exc)
            return
        except asyncio.CancelledError:
            _call(done, None, TransportError(f"connection to {self.endpoint} is closed",
                                             sent=False))
            raise
        if transport.is_closing():
            # Connected, then lost before this task ran (the peer closed it at once, or another
            # request's connect finished earlier): writing to it would raise on uvloop.
            _call(done, None, TransportError(
                f"connection to {self.endpoint} closed before the request was sent", sent=False))
            return
        try:
            send(transport)
        except Exception as exc:  # the encoder's error: nothing was sent
            _call(done, None, exc)

    def _write(
        self,
        transport: asyncio.Transport,
        *,
        api_key: int,
        encode: Encode,
        decode: Callable[[bytes], Any],
        timeout_s: float,
        done: Callable[[Any, BaseException | None], None],
    ) -> None:
        corr = next(self._corr) & 0x7FFFFFFF
        data = encode(corr, self._client_id)
        timer = asyncio.get_running_loop().call_later(timeout_s, self._timed_out, corr)
        self._pending[corr] = _Pending(api_key, decode, done, timer, timeout_s)
        transport.write(data)

    def _timed_out(self, corr: int) -> None:
        pending = self._pending.pop(corr, None)
        if pending is not None:
            _call(pending.done, None, TransportError(
                f"request {_api_name(pending.api_key)} to {self.endpoint} timed out after "
                f"{pending.timeout_s:.1f} s"
            ))

    async def request(
        self, api_key: int, api_version: int, body: Body, timeout_s: float
    ) -> Body:
        """Send one request and wait for its response body; raises :class:`TransportError`."""
        fut: asyncio.Future[Body] = asyncio.get_running_loop().create_future()

        def encode(corr: int, client_id: str) -> bytes:
            return encode_request(api_key, api_version, corr, client_id, body)

        def decode(payload: bytes) -> Body:
            return decode_response(api_key, api_version, payload)[1]

        def done(result: Body | None, error: BaseException | None) -> None:
            if fut.done():
                return  # the caller stopped waiting
            if error is not None:
                fut.set_exception(error)
            else:
                assert result is not None
                fut.set_result(result)

        self.start_request(api_key, encode, decode, timeout_s, done)
        return await fut

    def _lost(self, transport: asyncio.Transport, error: str, *, not_kafka: bool) -> None:
        """The connection behind ``transport`` is gone: every request on it fails."""
        if self._transport is transport:
            self._transport = self._protocol = None
        self._fail_pending(TransportError(f"{self.endpoint}: {error}", not_kafka=not_kafka))

    def _fail_pending(self, failure: TransportError) -> None:
        pending, self._pending = self._pending, {}
        for item in pending.values():
            item.timer.cancel()
            _call(item.done, None, failure)

    def _complete(self, payload: bytes) -> None:
        if len(payload) < 4:
            raise ProtocolError("response shorter than its correlation id")
        corr = int.from_bytes(payload[:4], "big", signed=True)
        pending = self._pending.pop(corr, None)
        if pending is None:
            return  # a response to a request that already timed out
        pending.timer.cancel()
        try:
            result = pending.decode(payload)
        except ProtocolError as exc:
            _call(pending.done, None, TransportError(f"{self.endpoint}: bad response: {exc}"))
            return
        except Exception as exc:
            _call(pending.done, None, exc)
            return
        _call(pending.done, result, None)

    async def close(self) -> None:
        self._closed = True
        protocol = self._protocol
        if self._transport is not None:
            self._transport.close()
        for task in list(self._connect_tasks):
            task.cancel()
        # Requests on the connection, and any whose connection never came up.
        self._fail_pending(TransportError(f"{self.endpoint}: connection closed"))
        if protocol is not None:
            # Until the transport has let go of its socket.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(protocol.closed), 2.0)


class _ClientProtocol(asyncio.Protocol):
    """The response side of one :class:`Connection`'s TCP connection: frames are matched to
    their requests in the transport's read callback, with no reader task in between."""

    def __init__(self, owner: Connection) -> None:
        self._owner = owner
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(owner._max_frame_bytes)
        self._head: bytes | None = b""  # the first bytes, until they tell an HTTP answer apart
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's: no isinstance

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._head is not None:
            self._head += data[: len(HTTP_HEAD) - len(self._head)]
            if self._head == HTTP_HEAD:
                # An HTTP server's answer to our frame ("HTTP/1.1 400 ..."): read as a frame it
                # is an absurd length; say what the endpoint is instead.
                self._fail("answered in HTTP, not the Kafka protocol: this is an HTTP port; "
                           "point the client at a node's Raft listener (its listeners= "
                           "address)", not_kafka=True)
                return
            if not HTTP_HEAD.startswith(self._head):
                self._head = None  # a Kafka frame (or at least not HTTP): stop looking
        try:
            for payload in self._decoder.feed(data):
                self._owner._complete(payload)
        except ProtocolError as exc:
            self._fail(f"bad response frame: {exc}")

    def _fail(self, error: str, *, not_kafka: bool = False) -> None:
        assert self._transport is not None
        self._transport.close()
        self._report_lost(error, not_kafka=not_kafka)  # now, not when the socket is let go

    def connection_lost(self, exc: Exception | None) -> None:
        self._report_lost("connection closed by peer" if exc is None
                          else f"connection error: {exc}")
        if not self.closed.done():
            self.closed.set_result(None)

    def _report_lost(self, error: str, *, not_kafka: bool = False) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:  # once: the first reason is the one reported
            self._owner._lost(transport, error, not_kafka=not_kafka)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def _call(done: Callable[[Any, BaseException | None], None], result: Any,
          error: BaseException | None) -> None:
    """Run a completion callback; its failure is a bug of the caller, logged, never the
    connection's."""
    try:
        done(result, error)
    except Exception:
        log.exception("request completion callback failed")

