"""etcd's listener as several ``grpc.aio`` servers sharing one port (``SO_REUSEPORT``), so that
more calls reach the servicers per turn of the node's loop.

Why: a ``grpc.aio`` server accepts one call at a time. Its serving task asks gRPC's core for
the next call, and only once that answer has come back from gRPC's poller thread (an eventfd
write to wake it, a wake-up of the loop) does it ask for the one after. Under etcd's
``benchmark`` at 256 clients on 16 connections, only about 10 Puts were inside the servicer
at any moment while the client had 256 outstanding: the rest queued in gRPC, each Put went
into an append of its own, and every call paid its own round of thread hand-offs. With
``ACCEPTORS`` servers, the kernel spreads the connections over them, each server's task asks
for calls of its own connections, and one wake-up of the loop delivers several calls: the
leader's CPU per Put at 256 clients fell from 0.77 to 0.43 ms, per linearizable Range from
0.52 to 0.32 ms (1 vs 16 acceptors, docs/etcd-api.md "How fast it is"). One connection is
served by one server, as before.

``SO_REUSEPORT`` would let a second process of the same user bind the same port without an
error (two nodes misconfigured onto one port would share its connections): the port is first
bound by a plain socket without it (``_probe``), which fails if anything listens there, so a
taken port is refused as before.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Sequence
from typing import Final

import grpc

log = logging.getLogger(__name__)

# Servers sharing the port. 16: etcd's benchmark's (and clientv3's usual) connection counts
# are at most 16; 4 and 8 measured between 1 and 16 (docs/etcd-api.md).
ACCEPTORS: Final = 16


def _probe(host: str, port: int) -> None:
    """Raise OSError(EADDRINUSE) if something listens on ``host:port`` (a plain bind, with
    SO_REUSEADDR as gRPC's own, so connections in TIME_WAIT do not count)."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return  # gRPC's own bind reports an unresolvable host
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise
                # another reason (no IPv6 here, say): gRPC's bind decides


class Acceptors:
    """The servers of one listener; ``port`` the one they share."""

    def __init__(self, servers: Sequence[grpc.aio.Server], port: int) -> None:
        self._servers = list(servers)
        self.port = port

    async def start(self) -> None:
        for server in self._servers:
            await server.start()

    async def stop(self, grace_s: float) -> None:
        """Stop every server at once (calls in flight get ``grace_s``)."""
        await asyncio.gather(*(s.stop(grace_s) for s in self._servers))


def bind(handlers: Sequence[grpc.GenericRpcHandler], host: str, port: int,
         credentials: grpc.ServerCredentials | None, *, count: int = ACCEPTORS) -> Acceptors:
    """``count`` servers with ``handlers`` bound to ``host:port`` (0: a free port, the same
    for all); not started. Raises RuntimeError (gRPC's) or OSError when the port is taken."""
    _probe(host, port)
    servers: list[grpc.aio.Server] = []
    bound = port
    for _ in range(count):
        server = grpc.aio.server(options=[("grpc.so_reuseport", 1)])
        server.add_generic_rpc_handlers(tuple(handlers))
        target = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        bound = (server.add_insecure_port(target) if credentials is None
                 else server.add_secure_port(target, credentials))
        servers.append(server)
    return Acceptors(servers, bound)
