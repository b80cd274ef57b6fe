"""Connections handed to the leader's process: the router peeks at the first request line and
passes the socket itself (``SCM_RIGHTS``) to the leader's API when it runs on this host, and
proxies everything else as before. Real loopback sockets and a real handoff channel."""

from __future__ import annotations

import asyncio
import json

import pytest

from kraft_spark.net.handoff import SUPPORTED
from kraft_spark.proxy.messages import ResponseWatcher
from kraft_spark.proxy.router import AppendRouter
from kraft_spark.proxy.triage import first_request_routes_to_leader
from tests.proxy.test_router import APPEND, QUORUM, Upstream, exchange, run_with

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="connection handoff is Linux-only")


@pytest.mark.parametrize(("head", "expected"), [
    (b"POST /v1/records HTTP/1.1\r\n", True),
    (b"POST /v1/records?x=1 HTTP/1.1\r\n", True),
    (b"GET /v1/kv/a/b HTTP/1.1\r\n", True),
    (b"GET /v1/kv?prefix=a HTTP/1.1\r\n", True),
    (b"GET /v1/quorum HTTP/1.1\r\n", False),
    (b"GET /v1/records HTTP/1.1\r\n", False),
    (b"POST /v1/kv/a HTTP/1.1\r\n", False),  # a conditional write: the sidecar's
    (b"POST /v1/recordsX HTTP/1.1\r\n", False),
    (b"POST http://h/v1/records HTTP/1.1\r\n", False),  # absolute form: proxied
    (b"POST /v1/records", False),  # the line not arrived whole: proxied
    (b"POS", False),
    (b"", False),
])
def test_the_first_request_line_decides(head: bytes, expected: bool) -> None:
    assert first_request_routes_to_leader(head) is expected


async def one_by_one(port: int, *requests: bytes) -> list[tuple[int, bytes]]:
    """Send ``requests`` on one connection, each after the answer before it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers: list[tuple[int, bytes]] = []
    try:
        for request in requests:
            writer.write(request)
            watcher, raw = ResponseWatcher(), b""
            while not watcher.feed(data := await asyncio.wait_for(reader.read(65536), 5)):
                assert data, "the connection closed before the answer"
                raw += data
            answers.append((watcher.status, (raw + data).partition(b"\r\n\r\n")[2]))
    finally:
        writer.close()
    return answers


def answer_of(answer: tuple[int, bytes]) -> dict[str, object]:
    assert answer[0] == 200, answer
    return dict(json.loads(answer[1]))


def test_a_connection_opened_by_an_append_is_served_by_the_leader_itself() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        # Handed over: the leader serves the socket accepted on the router's port.
        first = answer_of((await one_by_one(port, APPEND))[0])
        assert first == {"by": "leader", "path": "/v1/records", "port": port}
        assert leader.receiver is not None and leader.receiver.received == 1
        assert router.handoff is not None and router.handoff.sent == 1
        # The connection is the leader's from then on, whatever it asks next.
        answers = await one_by_one(port, APPEND, QUORUM)
        assert [answer_of(a)["by"] for a in answers] == ["leader", "leader"]
        # A connection opened by anything else is proxied: the sidecar sees its own port.
        quorum = answer_of((await exchange(port, QUORUM))[0])
        assert quorum["by"] == "sidecar" and quorum["port"] != port
        # No leader known: nothing to hand to.
        router.set_leader(None)
        assert answer_of((await exchange(port, APPEND))[0])["by"] == "sidecar"
        assert leader.receiver.received == 2

    run_with(test, handoff=True)


def test_without_a_channel_appends_are_proxied_to_the_leader() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        assert leader.receiver is not None
        leader.receiver.close()  # the leader's process stopped taking connections
        answer = answer_of((await exchange(port, APPEND))[0])
        assert answer["by"] == "leader" and answer["port"] != port  # proxied
        assert leader.receiver.received == 0

    run_with(test, handoff=True)


def test_handoff_off_proxies_every_request() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        answer = answer_of((await exchange(port, APPEND))[0])
        assert answer["by"] == "leader" and answer["port"] != port
        assert router.handoff is None

    run_with(test)  # the router made with handoff=False, as --no-handoff does


def test_a_first_line_in_pieces_and_a_silent_client_are_proxied() -> None:
    async def test(router: AppendRouter, port: int, leader: Upstream, sidecar: Upstream) -> None:
        silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(APPEND[:3])  # "POS": not enough to decide
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(APPEND[3:])
        raw = await asyncio.wait_for(reader.read(65536), 5)
        body = json.loads(raw.partition(b"\r\n\r\n")[2])
        assert body["by"] == "leader" and body["port"] != port  # proxied, and answered
        writer.close()
        # A client that closes before sending anything costs nothing and leaks nothing.
        silent.close()
        await asyncio.sleep(0.1)
        assert await silent_reader.read() == b""
        assert leader.receiver is not None and leader.receiver.received == 0

    run_with(test, handoff=True)
