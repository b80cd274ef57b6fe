"""Handing accepted TCP connections to another process on the same host (``SCM_RIGHTS``).

The append router (``kraft_spark.proxy``) serves the address users are given; when the leader's
own HTTP API runs on the same host, the router passes a connection whose first request is an
append to the leader's process, which serves it from then on as if it had accepted it itself.
That costs once per connection, not per request: the user's address answers at the speed of
the leader's own port.

Each HTTP API listening on ``HOST:PORT`` offers a channel at the Linux abstract Unix socket
name ``handoff_name(HOST, PORT)``. Abstract names live in the network namespace, so a name
made of the address a peer advertises can only be found by a process that can reach that
address on loopback-like terms (the same host, the same namespace); a leader on another host
has no channel here and the router proxies its requests instead. Only a process of the same
user may hand over (``SO_PEERCRED``): a handed-over connection is then no more than one the
process could have accepted itself, and every request on it is authenticated as usual.

Messages on a ``SOCK_SEQPACKET`` channel: one byte and up to ``MAX_FDS_PER_MESSAGE``
descriptors each (message boundaries keep descriptors with their own message).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
import sys
from collections import deque
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

SUPPORTED: Final = sys.platform.startswith("linux")
# The receiver reads at most this many messages per readiness (the rest: next iteration).
MAX_PER_CALL: Final = 64
# Descriptors in one message: the kernel's limit (SCM_MAX_FD).
MAX_FDS_PER_MESSAGE: Final = 253
_PEERCRED: Final = struct.Struct("3i")  # pid, uid, gid
_TAG: Final = b"c"


def handoff_name(host: str, port: int) -> bytes:
    """The channel of the HTTP API listening on ``host:port`` (brackets of IPv6 hosts off)."""
    return b"\0kraft-spark/http-handoff/" + f"{host.strip('[]')}:{port}".encode()


def _peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    return int(_PEERCRED.unpack(creds)[1])


class HandoffReceiver:
    """Takes the connections handed over on ``name`` and gives each to ``adopt`` (a
    non-blocking, connected TCP socket the callee now owns). Runs on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: bytes,
                 adopt: Callable[[socket.socket], None]) -> None:
        self._loop = loop
        self._name = name
        self._adopt = adopt
        self._listener: socket.socket | None = None
        self._channels: dict[int, socket.socket] = {}
        self.received = 0  # for tests and diagnostics

    def start(self) -> bool:
        """Listen on the channel; False (logged) where that is impossible: not Linux, or the
        name is taken (another process serves the same address string)."""
        if not SUPPORTED:
            return False
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            listener.bind(self._name)
            listener.listen(16)
        except OSError as exc:
            listener.close()
            log.info("no connection handoff for %r: %s", self._name[1:].decode(), exc)
            return False
        listener.setblocking(False)
        self._listener = listener
        self._loop.add_reader(listener.fileno(), self._on_channel)
        return True

    def close(self) -> None:
        """Stop taking connections (those handed over already carry on). Idempotent."""
        if self._listener is not None:
            self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        for fd, channel in list(self._channels.items()):
            self._loop.remove_reader(fd)
            channel.close()
        self._channels.clear()

    def _on_channel(self) -> None:
        assert self._listener is not None
        try:
            channel, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        except OSError as exc:
            log.warning("cannot accept a handoff channel: %s", exc)
            return
        try:
            uid = _peer_uid(channel)
        except OSError:
            channel.close()
            return
        if uid != os.getuid():
            log.warning("refused a connection handoff from uid %d (only uid %d may)", uid,
                        os.getuid())
            channel.close()
            return
        channel.setblocking(False)
        self._channels[channel.fileno()] = channel
        self._loop.add_reader(channel.fileno(), self._on_message, channel)

    def _on_message(self, channel: socket.socket) -> None:
        for _ in range(MAX_PER_CALL):
            try:
                data, fds, flags, _ = socket.recv_fds(channel, 16, MAX_FDS_PER_MESSAGE,
                                                      socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.debug("handoff channel failed: %s", exc)
                data, fds, flags = b"", [], 0
            if flags & socket.MSG_CTRUNC:  # cannot happen with our sender: said if it does
                log.warning("a connection handoff message was cut short: connections lost")
            if not data and not fds:  # the sender closed its end
                self._loop.remove_reader(channel.fileno())
                self._channels.pop(channel.fileno(), None)
                channel.close()
                return
            for fd in fds:
                try:
                    conn = socket.socket(fileno=fd)
                except OSError:
                    os.close(fd)
                    continue
                if conn.family not in (socket.AF_INET, socket.AF_INET6) \
                        or conn.type != socket.SOCK_STREAM:  # only TCP connections are served
                    conn.close()
                    continue
                self.received += 1
                self._adopt(conn)


class HandoffSender:
    """The router's end of one HTTP API's channel. ``send`` takes a connection to hand over, or
    says at once that it cannot (then the caller serves it itself). Never blocks.

    Connections are sent in batches (all those taken in one loop iteration, up to
    ``MAX_FDS_PER_MESSAGE`` per message): the channel holds what the sender's socket buffer
    holds until the receiver reads (278 one-descriptor messages with Linux's default 208 KiB),
    which a client pool opening hundreds of connections at once against a busy leader could
    fill. When it is full the rest wait for it to drain; when it fails they are given to their
    ``fallback``."""

    RETRY_S: Final = 1.0  # a channel that could not be opened is tried again after this
    MAX_QUEUED: Final = 4096

    def __init__(self, host: str, port: int) -> None:
        self.name = handoff_name(host, port)
        self._channel: socket.socket | None = None
        self._retry_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: deque[tuple[socket.socket, Callable[[socket.socket], None]]] = deque()
        self._flush_scheduled = False
        self._writing = False
        self.sent = 0

    def available(self, now: float) -> bool:
        """Whether a connection could be handed over now (opens the channel if need be)."""
        if self._channel is not None:
            return True
        if not SUPPORTED or now < self._retry_at:
            return False
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        channel.setblocking(False)
        try:
            channel.connect(self.name)
        except OSError:  # no such API on this host (or its backlog is full): proxy instead
            channel.close()
            self._retry_at = now + self.RETRY_S
            return False
        self._channel = channel
        return True

    def send(self, conn: socket.socket, now: float,
             fallback: Callable[[socket.socket], None]) -> bool:
        """Take ``conn`` to hand over (on the running loop, within the iteration or once the
        channel drains), or return False at once and leave it to the caller. Once taken it is
        the sender's: its descriptor here is closed once sent, or it goes to ``fallback`` if
        the channel fails first."""
        if len(self._pending) >= self.MAX_QUEUED or not self.available(now):
            return False
        self._pending.append((conn, fallback))
        if not self._flush_scheduled and not self._writing:
            self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self._flush)
            self._flush_scheduled = True
        return True

    def _flush(self) -> None:
        self._flush_scheduled = False
        channel, pending = self._channel, self._pending
        while pending and channel is not None:
            batch = [pending[i] for i in range(min(len(pending), MAX_FDS_PER_MESSAGE))]
            try:
                socket.send_fds(channel, [_TAG], [conn.fileno() for conn, _ in batch],
                                socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                self._wait_writable(channel)  # the receiver is behind: wait until it reads
                return
            except OSError as exc:  # the receiver went away: the rest are proxied
                log.debug("handoff to %r failed: %s", self.name[1:].decode(), exc)
                self._retry_at = (self._loop.time() if self._loop else 0.0) + self.RETRY_S
                self.close()
                return
            for _ in batch:
                pending.popleft()[0].close()  # the receiver holds it now
            self.sent += len(batch)
        self._stop_writing()

    def _wait_writable(self, channel: socket.socket) -> None:
        if not self._writing and self._loop is not None:
            self._loop.add_writer(channel.fileno(), self._flush)
            self._writing = True

    def _stop_writing(self) -> None:
        if self._writing and self._loop is not None and self._channel is not None:
            self._loop.remove_writer(self._channel.fileno())
        self._writing = False

    def close(self) -> None:
        """Close the channel; connections not sent yet go to their fallback."""
        self._stop_writing()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        pending, self._pending = self._pending, deque()
        for conn, fallback in pending:
            fallback(conn)


__all__ = ["SUPPORTED", "HandoffReceiver", "HandoffSender", "handoff_name"]
