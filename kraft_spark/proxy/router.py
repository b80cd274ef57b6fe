"""The append router: the address users are given, in front of the leader's own HTTP API.

Every request on the user's address is read whole (``messages.RequestReader``) and sent on a
kept-alive connection to one of two upstreams:

* an append (``POST /v1/records``) or a read by key (``GET /v1/kv...``) to the **leader's own
  HTTP API** when the leader is known:
  there it goes straight into the leader's core, batched with the other appends in flight
  (``api/local_appends.py``), with no second HTTP stack, JSON decode or Kafka Produce on the
  way; the answer's bytes come back untouched;
* everything else, and appends while no leader is known, to the **sidecar** (the full API:
  quorum, store, leases, watches, the application's own routes), which reaches the leader
  over the quorum's protocol and waits out an election.

The leader's address is set from outside (``set_leader``) as soon as the host process learns
of a change; a request in flight at a leader change is not lost: the old leader's API answers
it (forwarding it itself if it is no longer leader) or its connection breaks, and then:

* the connection could not be made: the request never left, so it goes to the sidecar
  instead, as do the leader's requests for the next half second;
* the connection broke after the request was sent: the append may have been made. With an
  ``Idempotency-Key`` it is sent again through the sidecar, which returns the first result if
  it was; without one the client gets 502 saying so, as any proxy must.

A leader that is replaced while requests are in flight at it gets ``RETIRE_GRACE_S`` to answer
them (alive, it does at once); then they are given up as if its connection broke (a frozen
leader would otherwise hold its clients past the election).

Credentials are the upstream's business: the user's ``Authorization`` header goes through
unchanged, and the leader's API checks it against the same credentials as the sidecar.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from dataclasses import dataclass
from typing import Final, cast

from kraft_spark.net.acceptor import EagerAcceptor
from kraft_spark.net.handoff import HandoffSender
from kraft_spark.proxy.messages import BadRequest, ProxyRequest, RequestReader, error_response
from kraft_spark.proxy.triage import APPEND_PATH, HandoffTriage, routes_to_leader
from kraft_spark.proxy.upstream import Exchange, Upstream, UpstreamClosed, UpstreamConnection

log = logging.getLogger(__name__)

# Requests read ahead of the one being answered (pipelining) before reading pauses.
MAX_QUEUED: Final = 32
KEEP_ALIVE_S: Final = 5.0  # an idle client connection is closed after this (uvicorn's)
# A request in flight at a leader that was replaced is given up after this: a deposed leader
# that is alive answers at once (it forwards, or says it no longer leads); a frozen one might
# never, and its clients would wait on it past the election.
RETIRE_GRACE_S: Final = 1.0
# A leader whose API could not be reached is not tried again for this long.
UNREACHABLE_REST_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class RouterLimits:
    max_connections: int = 2048
    header_timeout_s: float = 10.0


@dataclass(slots=True)
class RouterStats:
    resent: int = 0  # appends with an Idempotency-Key sent again after a broken connection


class AppendRouter:
    """``handoff``: connections whose first request goes to the leader are handed to the
    leader's process when it runs on this host (``proxy/triage.py``)."""

    def __init__(self, sidecar: tuple[str, int], limits: RouterLimits | None = None, *,
                 handoff: bool = True) -> None:
        self.sidecar = Upstream(*sidecar)
        self.leader: Upstream | None = None
        self.handoff_enabled = handoff
        self.handoff: HandoffSender | None = None  # the current leader's channel
        self.limits = limits or RouterLimits()
        self.stats = RouterStats()
        self.connections: set[ClientConnection] = set()

    def set_leader(self, address: tuple[str, int] | None) -> None:
        """The leader's own HTTP API (host, port), or None while none is known."""
        current = self.leader
        if address is not None and current is not None and (
                current.host, current.port) == address:
            return
        if current is not None:
            current.retire(RETIRE_GRACE_S)
        if self.handoff is not None:
            self.handoff.close()
        self.leader = Upstream(*address) if address is not None else None
        self.handoff = (HandoffSender(*address)
                        if address is not None and self.handoff_enabled else None)
        log.info("appends go to %s", self.leader.address if self.leader else "the sidecar")

    def upstream_for(self, request: ProxyRequest) -> Upstream:
        leader = self.leader
        if leader is not None and goes_to_leader(request) and not leader.resting():
            return leader
        return self.sidecar

    def close(self) -> None:
        for conn in list(self.connections):
            conn.abort()
        self.sidecar.close()
        if self.leader is not None:
            self.leader.close()
        if self.handoff is not None:
            self.handoff.close()


class ClientConnection(asyncio.Protocol, Exchange):
    """One user connection: its requests answered one after the other, in order."""

    def __init__(self, router: AppendRouter) -> None:
        self._router = router
        self._reader = RequestReader()
        self._queue: deque[ProxyRequest] = deque()
        self._transport: asyncio.Transport | None = None
        # The request being answered, its bytes, and the upstream connection carrying it.
        self._current: ProxyRequest | None = None
        self._encoded = b""
        self._conn: UpstreamConnection | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._closing = False
        # A bad request read while another was being answered: said once that one is done.
        self._closing_after: tuple[int, str] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    # ---------------------------------------------------------------- client transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        router = self._router
        if len(router.connections) >= router.limits.max_connections:
            self._answer_and_close(503, f"too many connections (kraft.http.max.connections="
                                        f"{router.limits.max_connections}); retry later")
            return
        router.connections.add(self)
        self._arm(KEEP_ALIVE_S)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            requests = self._reader.feed(data)
        except BadRequest as exc:
            self._queue.clear()
            if self._current is None:
                self._answer_and_close(exc.status, exc.detail)
            else:  # answer what came before first; nothing more is read
                self._closing_after = (exc.status, exc.detail)
            return
        if self._reader.continue_wanted and self._current is None and not self._queue \
                and self._transport is not None:  # never inside another request's answer
            self._reader.continue_wanted = False
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if not requests:
            if self._current is None:
                self._arm(self._router.limits.header_timeout_s)  # a request is arriving
            return
        self._queue.extend(requests)
        if len(self._queue) > MAX_QUEUED and self._transport is not None:
            self._transport.pause_reading()
        if self._current is None:
            self._disarm()
            self._next()

    def pause_writing(self) -> None:
        if self._conn is not None:
            self._conn.pause_reading()

    def resume_writing(self) -> None:
        if self._conn is not None:
            self._conn.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._disarm()
        self._router.connections.discard(self)
        if self._conn is not None:
            self._conn.abandon()
            self._conn = None
        if self._connecting is not None:
            self._connecting.cancel()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # ---------------------------------------------------------------- forwarding

    def _next(self) -> None:
        if self._closing:
            return
        if not self._queue:
            if self._transport is not None:
                self._transport.resume_reading()
            self._arm(KEEP_ALIVE_S)
            return
        request = self._current = self._queue.popleft()
        self._encoded = request.encode()
        self._dispatch(self._router.upstream_for(request))

    def _dispatch(self, upstream: Upstream) -> None:
        conn = upstream.take_idle()
        if conn is None:
            self._connecting = self._loop.create_task(self._connect(upstream))
            return
        self._send_on(conn)

    async def _connect(self, upstream: Upstream) -> None:
        try:
            conn = await upstream.connect()
        except (TimeoutError, OSError) as exc:
            self._connecting = None
            self._unreachable(upstream, exc)
            return
        self._connecting = None
        if self._closing:
            conn.close()
            return
        self._send_on(conn)

    def _send_on(self, conn: UpstreamConnection) -> None:
        self._conn = conn
        head = self._current is not None and self._current.method == "HEAD"
        conn.start(self._encoded, self, head=head)

    def _unreachable(self, upstream: Upstream, exc: BaseException) -> None:
        router = self._router
        if upstream is router.sidecar:
            self._answer_and_close(503, f"the HTTP API ({upstream.address}) cannot be "
                                        f"reached: {exc or type(exc).__name__}")
            return
        # The leader's API could not be reached: the request never left; the sidecar waits
        # for the next leader. The leader is left alone for a moment (a host that drops
        # connections would cost every request a connect timeout), then tried again: its host
        # learns of a new leader only when there is one.
        upstream.rest(UNREACHABLE_REST_S)
        self._dispatch(router.sidecar)

    # Exchange: the upstream connection's callbacks
    def relay(self, data: bytes) -> None:
        if self._transport is not None:
            self._transport.write(data)

    def completed(self, upstream: Upstream, conn: UpstreamConnection, keep_alive: bool) -> None:
        upstream.give_back(conn, keep_alive)
        self._conn = None
        request, self._current = self._current, None
        if request is None or not request.keep_alive:
            self._close()
            return
        if self._closing_after is not None:
            self._answer_and_close(*self._closing_after)
            return
        self._next()

    def failed(self, upstream: Upstream, error: UpstreamClosed) -> None:
        self._conn = None
        request, router = self._current, self._router
        if error.answered or request is None:  # part of an answer went out: cannot go on
            self._close()
            return
        if upstream is router.sidecar or not _safe_to_resend(request):
            detail = f"{error}: the request may or may not have been carried out"
            if request.method == "POST" and request.path == APPEND_PATH:
                detail += "; send appends with an Idempotency-Key to retry them safely"
            self._answer_and_close(502, detail)
            return
        router.stats.resent += 1  # safe: the key makes a second append return the first
        self._dispatch(router.sidecar)

    # ---------------------------------------------------------------- closing

    def _answer_and_close(self, status: int, detail: str) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(error_response(status, detail))
        self._close()

    def _close(self) -> None:
        self._closing = True
        self._disarm()
        if self._transport is not None:
            self._transport.close()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self._loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._current is not None:
            return  # answering: the upstream's own timeouts apply
        if self._reader.in_message:
            self._answer_and_close(408, "the request was not complete within "
                                        f"{self._router.limits.header_timeout_s:g} s")
        else:
            self._close()  # idle keep-alive connection


def goes_to_leader(request: ProxyRequest) -> bool:
    """Appends, and reads by key: a read after a write through this address sees it (the
    leader applied the write before it answered), as a member of etcd answers its own client.
    Watches stay on the sidecar: its stream outlives leader changes."""
    return routes_to_leader(request.method, request.path)


def _safe_to_resend(request: ProxyRequest) -> bool:
    """A read, or an append carrying an Idempotency-Key (a second one returns the first's
    result): sending it again after a broken connection cannot do anything twice."""
    return request.method == "GET" or any(name.lower() == b"idempotency-key"
                                          for name, _ in request.headers)


class Serving:
    """The router served on a listening socket; ``close()`` stops accepting."""

    def __init__(self, acceptor: EagerAcceptor, triage: HandoffTriage) -> None:
        self.acceptor = acceptor
        self.triage = triage

    def close(self) -> None:
        self.acceptor.close()
        self.triage.close()


def serve(router: AppendRouter, sock: socket.socket) -> Serving:
    """Serve ``router`` on a bound, listening ``sock`` until the returned value is closed
    (then ``router.close()``). Every pending connection is accepted at once (``EagerAcceptor``:
    uvloop's own accept takes one per loop turn)."""
    triage = HandoffTriage(lambda: router.handoff, router.limits.header_timeout_s)
    acceptor = EagerAcceptor(asyncio.get_running_loop(), sock,
                             lambda: ClientConnection(router), triage)
    triage.adopt = acceptor.adopt
    acceptor.start()
    return Serving(acceptor, triage)
