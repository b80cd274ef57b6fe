"""TCP transport for Kafka-framed requests: a server side and a pipelining client side.

Server (in ``frame_server``): :class:`FrameServer` accepts connections, splits each byte
stream into frames with a maximum size, decodes the request header and body, and hands them to
a handler that answers later (possibly out of order: responses carry the correlation id, and
every client of this project matches on it). Bad bytes close only that connection: an oversized
or malformed frame, an unknown API or version. ApiVersions with a version we do not speak is
answered with UNSUPPORTED_VERSION at v0 (as Kafka does) so clients can downgrade.

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
    FrameDecoder,
    ProtocolError,
    decode_response,
    encode_request,
    supported_api_versions,
)
from kraft_spark.protocol.sasl_plain import PlainCredentials, SaslError, login

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
    some HTTP server (an API port given for a Raft one), which will never take the request.
    ``auth_failed`` is True when SASL authentication was refused or is not offered."""

    def __init__(self, message: str, *, sent: bool = True, refused: bool = False,
                 not_kafka: bool = False, auth_failed: bool = False) -> None:
        super().__init__(message)
        self.sent = sent and not refused and not not_kafka and not auth_failed
        self.refused = refused
        self.not_kafka = not_kafka
        self.auth_failed = auth_failed  # SASL authentication failed: retrying will not help


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
        # KIP-853: a leader checks this before it adds a voter (voter_probe).
        "supported_features": [{"name": "kraft.version", "min_version": 0, "max_version": 1}],
    }


# ============================================================================ server side




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
        sasl: PlainCredentials | None = None,
    ) -> None:
        """``sasl``: authenticate every new connection with SASL/PLAIN before it carries a
        request (a SASL_PLAINTEXT listener; ``net.sasl_plain``).

        ``fail_fast_when_refused``: while waiting out the reconnect backoff after a refused
        attempt, fail new requests at once with ``refused`` instead of holding them until the
        next attempt. For callers with their own retry policy (the Raft shell): the peer was
        not listening a moment ago, and holding the request only delays what the caller learns.
        Clients that loop over endpoints keep the default, which paces them."""
        self.host = host
        self.port = port
        self._ssl = ssl_context
        self._sasl = sasl
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
                self._back_off(loop)
                self._last_refused = is_connection_refused(exc)
                raise TransportError(
                    f"cannot connect to {self.endpoint}: {exc}",
                    sent=False,
                    refused=self._last_refused,
                ) from exc
            if self._sasl is not None:
                await self._login(transport, loop)
            self._backoff = 0.0
            self._last_refused = False
            self._transport, self._protocol = transport, protocol
            return self._transport
        finally:
            fut, self._connecting = self._connecting, None
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _back_off(self, loop: asyncio.AbstractEventLoop) -> None:
        """A failed attempt: the next one waits twice as long (within the bounds)."""
        self._backoff = min(self._backoff_max, max(self._backoff_min, self._backoff * 2))
        self._next_attempt = loop.time() + self._backoff

    async def _login(self, transport: asyncio.Transport,
                     loop: asyncio.AbstractEventLoop) -> None:
        """SASL/PLAIN on a new connection, before anyone else may use it; on failure the
        connection is closed and the attempt backs off like a refused one."""
        assert self._sasl is not None

        async def request(api_key: int, api_version: int, body: Body) -> Body:
            # On the new connection itself: it is not this Connection's transport yet.
            return await self._call(api_key, api_version, body, self._connect_timeout_s,
                                    transport)

        try:
            await login(request, self._sasl)
        except (SaslError, TransportError) as exc:
            transport.close()
            if isinstance(exc, TransportError) and exc.not_kafka:
                raise  # an HTTP port: say that, not that authentication failed
            self._back_off(loop)
            raise TransportError(f"cannot authenticate to {self.endpoint}: {exc}",
                                 sent=False, auth_failed=isinstance(exc, SaslError)) from exc

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
        return await self._call(api_key, api_version, body, timeout_s, None)

    async def _call(self, api_key: int, api_version: int, body: Body, timeout_s: float,
                    transport: asyncio.Transport | None) -> Body:
        """``request``, on ``transport`` when given (a connection still logging in), else on
        this Connection's own (connecting first when needed)."""
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

        if transport is None:
            self.start_request(api_key, encode, decode, timeout_s, done)
        else:
            self._write(transport, api_key=api_key, encode=encode, decode=decode,
                        timeout_s=timeout_s, done=done)
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

