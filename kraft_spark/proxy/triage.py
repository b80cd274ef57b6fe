"""Which connections the router hands to the leader's process instead of proxying them.

When the leader's own HTTP API runs on the router's host (``make run``, ``kraft-spark local``),
a connection whose first request is an append or a read by key is handed to the leader's
process (``kraft_spark.net.handoff``) and served there from then on, at the speed of the
leader's own port: the router's hop is paid once per connection instead of once per request.

The first request line is *peeked* (``MSG_PEEK``), not read, so the leader's server reads the
connection from its first byte. Anything else (another first request, a first line not arrived
whole, no channel to the leader, a channel that is full) is proxied as before.

A connection handed over stays with that process. When it no longer leads, its API closes such
connections after answering (``api/handoff_close.py``), so their clients reconnect through the
router to the new leader.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Final

from kraft_spark.net.handoff import HandoffSender

log = logging.getLogger(__name__)

APPEND_PATH: Final = "/v1/records"
KV_PATH: Final = "/v1/kv"
# Enough for "POST /v1/records?<a short query> HTTP/1.1".
PEEK_BYTES: Final = 128


def routes_to_leader(method: str, path: str) -> bool:
    """Appends, and reads by key (a read after a write through the router sees it: the leader
    applied the write before it answered, as a member of etcd answers its own client)."""
    if method == "POST":
        return path == APPEND_PATH
    return method == "GET" and (path == KV_PATH or path.startswith(KV_PATH + "/"))


def first_request_routes_to_leader(head: bytes) -> bool:
    """From a connection's first bytes: its first request line is there whole and names an
    append or a read by key (origin-form target)."""
    method, sep, rest = head.partition(b" ")
    if not sep:
        return False
    target, sep, _ = rest.partition(b" ")
    if not sep or not target.startswith(b"/"):
        return False
    path = target.partition(b"?")[0]
    return routes_to_leader(method.decode("latin-1"), path.decode("latin-1"))


class HandoffTriage:
    """``EagerAcceptor``'s triage: waits for a connection's first bytes while a channel to the
    leader is open, then hands it over or gives it back to be proxied (``adopt``)."""

    def __init__(self, sender: Callable[[], HandoffSender | None], timeout_s: float) -> None:
        self._sender = sender
        self._timeout_s = timeout_s
        self._loop = asyncio.get_running_loop()
        self._waiting: dict[int, tuple[socket.socket, asyncio.TimerHandle]] = {}
        self.adopt: Callable[[socket.socket], None] = lambda conn: conn.close()
        self.handed = 0  # for tests and diagnostics

    def __call__(self, conn: socket.socket) -> bool:
        sender = self._sender()
        if sender is None or not sender.available(self._loop.time()):
            return False
        fd = conn.fileno()
        self._loop.add_reader(fd, self._readable, conn)
        # A client that sends nothing is proxied, where the header timeout applies.
        timer = self._loop.call_later(self._timeout_s, self._give_back, conn)
        self._waiting[fd] = (conn, timer)
        return True

    def _stop_waiting(self, conn: socket.socket) -> None:
        fd = conn.fileno()
        self._loop.remove_reader(fd)
        _, timer = self._waiting.pop(fd)
        timer.cancel()

    def _give_back(self, conn: socket.socket) -> None:
        self._stop_waiting(conn)
        self.adopt(conn)

    def _readable(self, conn: socket.socket) -> None:
        self._stop_waiting(conn)
        try:
            head = conn.recv(PEEK_BYTES, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            self.adopt(conn)
            return
        except OSError:
            conn.close()  # reset before its first request
            return
        if not head:
            conn.close()  # closed before its first request
            return
        sender = self._sender()
        if (sender is not None and first_request_routes_to_leader(head)
                and sender.send(conn, self._loop.time(), self.adopt)):
            self.handed += 1  # the sender closes it here once the leader's process has it
            return
        self.adopt(conn)

    def close(self) -> None:
        for conn, timer in list(self._waiting.values()):
            timer.cancel()
            self._loop.remove_reader(conn.fileno())
            conn.close()
        self._waiting.clear()


__all__ = ["APPEND_PATH", "KV_PATH", "HandoffTriage", "first_request_routes_to_leader",
           "routes_to_leader"]
