"""``POST /v1/records`` on the embedded API's connections: appends and other requests on one
keep-alive connection, pipelined behind a slower request, ``Connection: close``, and the answers
to requests that fail a check. Real uvicorn on loopback, real sockets, a real 3-node quorum."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from kraft_spark.net.node import RaftNode
from tests.metrics_text import samples
from tests.net.helpers import leader_of, the_leader, wait_for
from tests.net.test_node_http import run_http_quorum, url_of

pytestmark = pytest.mark.timeout(120)

RECORD = json.dumps({"key": "k", "value": {"n": 1}}).encode()


def request(body: bytes = RECORD, *, extra: str = "", path: str = "/v1/records",
            method: str = "POST") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def read_responses(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """``count`` whole responses (Content-Length framed) from a blocking socket."""
    buf = b""
    out: list[tuple[int, dict[str, str], bytes]] = []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(out)} responses"
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        length = int(headers["content-length"])
        while len(buf) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed inside a body"
            buf += chunk
        out.append((int(lines[0].split(" ")[1]), headers, buf[:length]))
        buf = buf[length:]
    return out


async def exchange(url: str, data: bytes, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """Send ``data`` on one connection and read ``count`` responses, off the nodes' loop."""
    host, port = url.removeprefix("http://").rsplit(":", 1)

    def run() -> list[tuple[int, dict[str, str], bytes]]:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(data)
            return read_responses(sock, count)

    return await asyncio.to_thread(run)


# --------------------------------------------------------------------------- embedded API


def test_the_leader_answers_appends_and_keeps_the_connection(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        await wait_for(lambda: leader_of(nodes) is not None, 10, "a leader")
        leader = the_leader(nodes)
        # Three appends on one keep-alive connection, then a GET on the same connection.
        data = request() * 3 + b"GET /v1/records?from_offset=0&limit=10 HTTP/1.1\r\nHost: t\r\n\r\n"
        answers = await exchange(url_of(leader), data, 4)
        assert [status for status, _, _ in answers] == [200, 200, 200, 200]
        offsets = [json.loads(payload) for _, _, payload in answers[:3]]
        assert [o["base_offset"] for o in offsets] == [
            offsets[0]["base_offset"] + i for i in range(3)]
        assert all(o["epoch"] == leader.core.epoch for o in offsets)
        for _, headers, _ in answers[:3]:
            assert headers["content-type"] == "application/json"
            assert "date" in headers and "connection" not in headers
        page = json.loads(answers[3][2])
        assert [r["offset"] for r in page["records"]][-3:] == [o["base_offset"] for o in offsets]
        # The metrics count them as the route would.
        [(status, _, text)] = await exchange(
            url_of(leader), b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", 1)
        assert status == 200
        values = samples(text.decode())
        assert values["kraft_spark_http_appended_records_total"] == 3
        assert values['kraft_spark_http_requests_total{method="POST",route="/v1/records",'
                      'status="200"}'] == 3

    asyncio.run(run_http_quorum(tmp_path, body))


def test_requests_failing_a_check_get_their_answers(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        await wait_for(lambda: leader_of(nodes) is not None, 10, "a leader")
        leader = the_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        url = url_of(leader)
        cases = [
            request(b"{not json"),  # fails a check: 400 from the app
            request(RECORD, extra="Idempotency-Key: once\r\n"),  # keyed: the app's path
            request(RECORD, extra="Idempotency-Key: once\r\n"),  # ... and its replay
            request(json.dumps({"key": "k"}).encode()),  # no value: 422
            (b"POST /v1/records HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
             b"Content-Length: 2\r\n\r\n{}"),  # 415
            (b"POST /v1/records HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
             + f"{len(RECORD):x}\r\n".encode() + RECORD + b"\r\n0\r\n\r\n"),  # chunked: 200
        ]
        answers = await exchange(url, b"".join(cases), len(cases))
        statuses = [status for status, _, _ in answers]
        assert statuses == [400, 200, 200, 422, 415, 200]
        assert "not valid JSON" in json.loads(answers[0][2])["error"]
        assert answers[2][1].get("idempotent-replayed") == "true"
        assert answers[1][2] == answers[2][2]
        # A follower forwards to the leader.
        answers = await exchange(url_of(follower), request(), 1)
        assert answers[0][0] == 200

    asyncio.run(run_http_quorum(tmp_path, body))


def test_connection_close_and_pipelining_behind_an_asgi_request(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        await wait_for(lambda: leader_of(nodes) is not None, 10, "a leader")
        leader = the_leader(nodes)
        # An app request (a slow-ish DescribeQuorum) pipelined before an append: the
        # append's answer must come second, in request order.
        data = (b"GET /v1/quorum HTTP/1.1\r\nHost: t\r\n\r\n" + request()
                + request(extra="Connection: close\r\n"))
        host, port = url_of(leader).removeprefix("http://").rsplit(":", 1)

        def run() -> tuple[list[tuple[int, dict[str, str], bytes]], bytes]:
            with socket.create_connection((host, int(port)), timeout=30) as sock:
                sock.sendall(data)
                got = read_responses(sock, 3)
                return got, sock.recv(100)  # b"": the server closed after the third

        answers, rest = await asyncio.to_thread(run)
        assert [status for status, _, _ in answers] == [200, 200, 200]
        assert "leaderId" in json.loads(answers[0][2])
        first, second = (json.loads(p) for _, _, p in answers[1:])
        assert second["base_offset"] == first["base_offset"] + 1
        assert answers[2][1]["connection"] == "close"
        assert rest == b""

    asyncio.run(run_http_quorum(tmp_path, body))
