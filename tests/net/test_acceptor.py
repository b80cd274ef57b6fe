"""``EagerAcceptor``: a burst of connections is accepted within a few loop iterations on both
loops (uvloop's own server takes one per iteration), the connections work, and closing stops
accepting. Real sockets on 127.0.0.1; the loop is made busy by a callback that sleeps per turn,
as a node's inline fsync does."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Callable
from typing import ClassVar, cast

import pytest
import uvloop

from kraft_spark.net.acceptor import EagerAcceptor

pytestmark = pytest.mark.timeout(60)

BURST = 200
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop,
}


class Echo(asyncio.Protocol):
    made: ClassVar[list[Echo]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        Echo.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data.upper())


def listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def round_trip(client: socket.socket, i: int) -> bytes:
    client.sendall(b"ping%d" % i)
    return client.recv(100)


async def turns_to_accept_burst(eager: bool) -> int:
    """Loop iterations (each ~2 ms busy) between a burst of BURST connects and the last
    connection_made; then checks that the connections work."""
    loop = asyncio.get_running_loop()
    Echo.made = []
    sock = listener()
    acceptor = None
    server = None
    if eager:
        acceptor = EagerAcceptor(loop, sock, Echo)
        acceptor.start()
    else:
        server = await loop.create_server(Echo, sock=sock, backlog=2048)
    turns = 0

    def busy() -> None:
        nonlocal turns
        turns += 1
        time.sleep(0.002)
        if len(Echo.made) < BURST:
            loop.call_soon(busy)

    port = sock.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(BURST)]
    started = turns
    loop.call_soon(busy)
    deadline = time.monotonic() + 20
    while len(Echo.made) < BURST and time.monotonic() < deadline:
        await asyncio.sleep(0.001)  # a timer: uvloop polls no I/O while sleep(0) keeps it busy
    assert len(Echo.made) == BURST, f"only {len(Echo.made)} of {BURST} connections accepted"
    accepted_in = turns - started
    for i, client in enumerate(clients[:20]):
        assert await loop.run_in_executor(None, round_trip, client, i) == b"PING%d" % i
    if eager:  # Nagle off on the server's side of every connection
        for proto in Echo.made:
            raw = proto.transport.get_extra_info("socket")
            assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    for client in clients:
        client.close()
    for proto in Echo.made:
        proto.transport.close()
    await asyncio.sleep(0.05)
    if acceptor is not None:
        acceptor.close()
        assert acceptor.accepted == BURST
    if server is not None:
        server.close()
    sock.close()
    return accepted_in


@pytest.mark.parametrize("loop_kind", sorted(LOOPS))
def test_a_burst_of_connections_is_accepted_in_a_few_busy_turns(loop_kind: str) -> None:
    loop = LOOPS[loop_kind]()
    try:
        turns = loop.run_until_complete(turns_to_accept_burst(eager=True))
    finally:
        loop.close()
    assert turns <= 10, f"{turns} busy loop turns to accept {BURST} queued connections"


def test_uvloop_own_server_takes_one_connection_per_turn() -> None:
    """The reason for EagerAcceptor: if a uvloop release accepts eagerly itself, this fails
    and the acceptor can go."""
    loop = uvloop.new_event_loop()
    try:
        turns = loop.run_until_complete(turns_to_accept_burst(eager=False))
    finally:
        loop.close()
    assert turns >= BURST // 2


class FailingListener(socket.socket):
    """A real listening socket whose accept fails with ``errno_`` the first ``times`` calls."""

    errno_ = errno.EMFILE
    times = 1

    def accept(self) -> tuple[socket.socket, object]:
        if FailingListener.times > 0:
            FailingListener.times -= 1
            raise OSError(FailingListener.errno_, "Too many open files")
        return super().accept()


def test_out_of_descriptors_pauses_accepting_then_resumes(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr("kraft_spark.net.acceptor.RESOURCE_RETRY_S", 0.2)

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        Echo.made = []
        sock = FailingListener(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        acceptor = EagerAcceptor(loop, sock, Echo)
        acceptor.start()
        started = time.monotonic()
        client = socket.create_connection(sock.getsockname())
        while not Echo.made and time.monotonic() - started < 10:
            await asyncio.sleep(0.01)
        waited = time.monotonic() - started
        acceptor.close()
        client.close()
        for proto in Echo.made:
            proto.transport.close()
        await asyncio.sleep(0.05)
        sock.close()
        assert len(Echo.made) == 1
        return waited

    FailingListener.times = 1
    waited = asyncio.run(scenario())
    assert waited >= 0.15, "accepting resumed before the retry delay"


def test_closed_acceptor_accepts_nothing() -> None:
    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        Echo.made = []
        sock = listener()
        acceptor = EagerAcceptor(loop, sock, Echo)
        acceptor.start()
        acceptor.close()
        acceptor.close()  # idempotent
        client = socket.create_connection(sock.getsockname())
        await asyncio.sleep(0.2)
        client.close()
        sock.close()
        return len(Echo.made)

    assert asyncio.run(scenario()) == 0
