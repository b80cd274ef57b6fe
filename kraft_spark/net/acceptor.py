"""Accept every pending connection at each readiness of a listening socket.

uvloop (the loop every kraft-spark process runs on, ``kraft_spark.aio``) accepts **one**
connection per loop iteration: measured with uvloop 0.23, 250 connections queued on a listener
whose loop spends 4 ms per iteration took 1,065 ms to be accepted, against 30 ms with asyncio's
own loop, which accepts all that are pending at once. A node's loop under load runs an fsync
in most iterations, so when wrk (or any client pool) opened 256 connections at once, the last
ones waited ~1 s in the kernel's accept queue before their first request was even read, and
the 256-connection p99 of a window was that second, every other window (``bench/``; the issue
27 notes). Requests on established connections never waited.

``EagerAcceptor`` does what asyncio's selector loop does, on any loop: a reader on the
listening socket that accepts until the queue is empty (bounded per call so one storm cannot
hold the loop), each connection handed to ``loop.connect_accepted_socket`` for the loop's own
transport. Accepted sockets get TCP_NODELAY (a response is one write; Nagle's algorithm with
delayed ACKs would add ~40 ms).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

# Per readiness callback, like asyncio's backlog loop: the rest waits one iteration.
MAX_ACCEPTS_PER_CALL: Final = 512
# Out of file descriptors (or memory): stop accepting for this long, as asyncio does.
RESOURCE_RETRY_S: Final = 1.0
_OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class EagerAcceptor:
    """Serves ``protocol_factory`` on a listening, non-blocking ``sock`` (not owned: the caller
    closes it after ``close``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        triage: Callable[[socket.socket], bool] | None = None,
    ) -> None:
        """``triage``: offered each accepted connection (non-blocking, TCP_NODELAY set) before
        it is served; True means it took the connection (it may give it back with ``adopt``)."""
        self._loop = loop
        self._sock = sock
        self._factory = protocol_factory
        self._triage = triage
        self._pending: set[asyncio.Task[object]] = set()
        self._reading = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self.accepted = 0  # for tests and diagnostics

    def start(self) -> None:
        if self._closed or self._reading:
            return
        self._sock.setblocking(False)
        self._loop.add_reader(self._sock.fileno(), self._on_readable)
        self._reading = True

    def close(self) -> None:
        """Stop accepting (connections already handed to the loop carry on; one whose transport
        appears after this is closed at once). Idempotent."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._sock.fileno())

    def _on_readable(self) -> None:
        for _ in range(MAX_ACCEPTS_PER_CALL):
            try:
                conn, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty
            except ConnectionAbortedError:
                continue  # reset by the client while queued
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    log.error("cannot accept connections on %s (%s); retrying in %.0f s",
                              self._sock.getsockname(), exc, RESOURCE_RETRY_S)
                    self._pause()
                    return
                log.exception("accept failed on %s", self._sock.getsockname())
                return
            if not _prepare(conn):
                continue
            self.accepted += 1
            if self._triage is None or not self._triage(conn):
                self._serve(conn)

    def adopt(self, conn: socket.socket) -> None:
        """Serve a connected socket accepted elsewhere (given back by the triage, or handed
        over by another process: ``kraft_spark.net.handoff``); this acceptor owns it now."""
        if self._closed:
            conn.close()
        elif _prepare(conn):
            self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        task = self._loop.create_task(self._connect(conn))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _connect(self, conn: socket.socket) -> object:
        try:
            transport, _ = await self._loop.connect_accepted_socket(self._factory, conn)
        except Exception as exc:  # the client went away before its transport existed
            log.debug("dropped an accepted connection: %s", exc)
            conn.close()
            return None
        if self._closed:
            # Accepted just before the server stopped: its shutdown has listed the connections
            # it closes already, so nobody would ever close this one.
            transport.close()
        return None

    def _pause(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._sock.fileno())
        self._retry = self._loop.call_later(RESOURCE_RETRY_S, self._resume)

    def _resume(self) -> None:
        self._retry = None
        self.start()


def _prepare(conn: socket.socket) -> bool:
    try:
        conn.setblocking(False)
        if conn.family in (socket.AF_INET, socket.AF_INET6):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        conn.close()  # gone already
        return False
    return True


__all__ = ["MAX_ACCEPTS_PER_CALL", "EagerAcceptor"]
