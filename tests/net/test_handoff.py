"""``kraft_spark.net.handoff``: passing accepted TCP connections between processes (here,
between two ends in one process: the descriptors cross a real Unix socket either way)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable

import pytest

from kraft_spark import aio
from kraft_spark.net.handoff import SUPPORTED, HandoffReceiver, HandoffSender, handoff_name

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="connection handoff is Linux-only")


def test_names_are_per_address() -> None:
    assert handoff_name("::1", 80) == handoff_name("[::1]", 80)
    assert handoff_name("127.0.0.1", 80) != handoff_name("127.0.0.1", 81)
    assert handoff_name("127.0.0.1", 80).startswith(b"\0")  # abstract: no file left behind


async def eventually(check: Callable[[], bool], seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within 5 s")


def test_a_connection_handed_over_carries_on_in_the_receiver() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        adopted: list[socket.socket] = []
        given_back: list[socket.socket] = []
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]
            receiver = HandoffReceiver(loop, handoff_name("127.0.0.1", port), adopted.append)
            assert receiver.start()
            # The same address string cannot be served twice on this host.
            assert not HandoffReceiver(loop, handoff_name("127.0.0.1", port),
                                       adopted.append).start()
            sender = HandoffSender("127.0.0.1", port)
            client = socket.create_connection(("127.0.0.1", port))
            accepted, _ = listener.accept()
            try:
                assert sender.send(accepted, loop.time(), given_back.append)
                await eventually(lambda: len(adopted) == 1)
                assert accepted.fileno() == -1  # the sender's copy, closed once sent
                conn = adopted[0]
                assert conn.getsockname()[1] == port
                client.sendall(b"hello")
                conn.setblocking(True)
                assert conn.recv(5) == b"hello"
                conn.sendall(b"world")
                assert client.recv(5) == b"world"
                # A descriptor that is not a TCP connection is refused, not served.
                left, right = socket.socketpair()
                assert sender.send(left, loop.time(), given_back.append)
                await eventually(lambda: left.fileno() == -1)
                await asyncio.sleep(0.05)
                assert receiver.received == 1 and len(adopted) == 1
                right.close()
                # The receiver gone: what was taken goes to its fallback, and the channel is
                # not tried again for a while.
                receiver.close()
                await asyncio.sleep(0.01)
                spare = socket.create_connection(("127.0.0.1", port))
                assert sender.send(spare, loop.time(), given_back.append)
                await eventually(lambda: given_back == [spare])
                assert not sender.available(loop.time())
                assert not sender.available(loop.time() + HandoffSender.RETRY_S / 2)
                assert not given_back[0]._closed  # type: ignore[attr-defined]
            finally:
                sender.close()
                client.close()
                for conn in adopted + given_back:
                    conn.close()

    aio.run(main())


BURST = 600


def test_a_burst_larger_than_the_channels_queue_waits_for_room_and_arrives_whole() -> None:
    """A channel holds what its sender's buffer holds until its reader reads (278 one-byte
    messages with the default 208 KiB): with the receiver's loop not running yet, the sender
    fills the channel, waits for room instead of failing or blocking, and sends the rest once
    the receiver reads."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        receiving = asyncio.new_event_loop()  # not running until the channel is full
        adopted: list[socket.socket] = []
        given_back: list[socket.socket] = []
        clients: list[socket.socket] = []
        with socket.create_server(("127.0.0.1", 0), backlog=1024) as listener:
            port = listener.getsockname()[1]
            receiver = HandoffReceiver(receiving, handoff_name("127.0.0.1", port),
                                       adopted.append)
            assert receiver.start()
            sender = HandoffSender("127.0.0.1", port)
            thread = threading.Thread(target=receiving.run_forever)
            try:
                for _ in range(BURST):  # one connection per loop iteration: one message each
                    clients.append(socket.create_connection(("127.0.0.1", port)))
                    accepted, _ = listener.accept()
                    assert sender.send(accepted, loop.time(), given_back.append)
                    await asyncio.sleep(0)
                assert 0 < sender.sent < BURST and given_back == []  # full: waiting for room
                thread.start()
                await eventually(lambda: len(adopted) == BURST)
                assert given_back == [] and sender.sent == BURST
            finally:
                sender.close()
                if thread.is_alive():
                    receiving.call_soon_threadsafe(receiver.close)
                    receiving.call_soon_threadsafe(receiving.stop)
                    thread.join(5)
                else:
                    receiver.close()
                receiving.close()
                for conn in clients + adopted:
                    conn.close()

    aio.run(main())


def test_no_channel_on_this_host_means_no_handoff() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        sender = HandoffSender("127.0.0.1", unused.getsockname()[1])
    assert not sender.available(0.0)
    left, right = socket.socketpair()
    assert not sender.send(left, 0.0, lambda conn: None)
    left.close()
    right.close()
    sender.close()
