"""``kraft_spark.net.handoff``: passing accepted TCP connections between processes (here,
between two ends in one process: the descriptors cross a real Unix socket either way)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from kraft_spark import aio
from kraft_spark.net.handoff import SUPPORTED, HandoffReceiver, HandoffSender, handoff_name

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="connection handoff is Linux-only")


def test_names_are_per_address() -> None:
    assert handoff_name("::1", 80) == handoff_name("[::1]", 80)
    assert handoff_name("127.0.0.1", 80) != handoff_name("127.0.0.1", 81)
    assert handoff_name("127.0.0.1", 80).startswith(b"\0")  # abstract: no file left behind


def test_a_connection_handed_over_carries_on_in_the_receiver() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        adopted: list[socket.socket] = []
        name_port = 0
        with socket.create_server(("127.0.0.1", 0)) as listener:
            name_port = listener.getsockname()[1]
            receiver = HandoffReceiver(loop, handoff_name("127.0.0.1", name_port), adopted.append)
            assert receiver.start()
            # The same address string cannot be served twice on this host.
            assert not HandoffReceiver(loop, handoff_name("127.0.0.1", name_port),
                                       adopted.append).start()
            sender = HandoffSender("127.0.0.1", name_port)
            client = socket.create_connection(("127.0.0.1", name_port))
            accepted, _ = listener.accept()
            try:
                assert sender.send(accepted, loop.time())
                accepted.close()  # the sender's copy: the connection lives on in the receiver
                for _ in range(100):
                    if adopted:
                        break
                    await asyncio.sleep(0.01)
                assert receiver.received == 1 and len(adopted) == 1
                conn = adopted[0]
                assert conn.getsockname()[1] == name_port
                client.sendall(b"hello")
                conn.setblocking(True)
                assert conn.recv(5) == b"hello"
                conn.sendall(b"world")
                assert client.recv(5) == b"world"
                # A descriptor that is not a TCP connection is refused, not served.
                left, right = socket.socketpair()
                assert sender.send(left, loop.time())
                await asyncio.sleep(0.05)
                assert receiver.received == 1
                left.close()
                right.close()
                # The receiver gone: the sender says so instead of blocking, then retries later.
                receiver.close()
                await asyncio.sleep(0.01)
                assert not sender.send(client, loop.time())
                assert not sender.available(loop.time())
                assert not sender.available(loop.time() + HandoffSender.RETRY_S / 2)
            finally:
                sender.close()
                client.close()
                for conn in adopted:
                    conn.close()

    aio.run(main())


def test_no_channel_on_this_host_means_no_handoff() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        sender = HandoffSender("127.0.0.1", unused.getsockname()[1])
    assert not sender.available(0.0)
    left, right = socket.socketpair()
    assert not sender.send(left, 0.0)
    left.close()
    right.close()
    sender.close()
