"""The HTTP listeners' connection cap and header timeout (``api.limits``), over real sockets.

uvicorn alone keeps a connection that sends nothing (or its headers a byte at a time) forever;
enough of them exhaust the process's descriptors. These tests serve the real app with uvicorn
on 127.0.0.1 (the quorum replaced by the in-memory backend of ``test_sidecar``: what is tested
here is the listener) and misbehave as raw sockets.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from api.app import create_app
from api.limits import HttpLimits, ListenerLimits, Receive, Scope, Send
from api.server import ServerHandle, serve_in_thread
from kraft_spark.net.config import NodeConfig
from kraft_spark.raft.config import ConfigError
from tests.api.test_sidecar import InMemoryTestBackend

pytestmark = [pytest.mark.timeout(60), pytest.mark.loop_free]

BODY = json.dumps({"key": "k", "value": "v"}).encode()


def _serve(limits: HttpLimits, backend: InMemoryTestBackend | None = None) -> ServerHandle:
    return serve_in_thread(create_app(backend or InMemoryTestBackend()), limits=limits)


@pytest.fixture
def small() -> Iterator[ServerHandle]:
    handle = _serve(HttpLimits(max_connections=3, header_timeout_s=0.5))
    try:
        yield handle
    finally:
        handle.stop()


def _connect(handle: ServerHandle) -> socket.socket:
    sock = socket.create_connection((handle.host, handle.port), timeout=5)
    sock.settimeout(5)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection. A reset after some of the
    answer ends it too: a server that closes while bytes of ours are unread (a trickling
    client's, sent after its answer) makes its kernel reset the connection, and the reset can
    arrive before our read of the end of stream. A reset before any answer still raises."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            if not chunks:
                raise
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _append(handle: ServerHandle) -> int:
    conn = http.client.HTTPConnection(handle.host, handle.port, timeout=5)
    try:
        conn.request("POST", "/v1/records", BODY, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_a_connection_over_the_cap_is_answered_503_and_closed(small: ServerHandle) -> None:
    held = [_connect(small) for _ in range(3)]
    try:
        time.sleep(0.1)  # accepted by the server's loop
        replies = []
        for _ in range(20):  # clients that send their request at once, as real ones do
            extra = _connect(small)
            extra.sendall(b"POST /v1/records HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (len(BODY), BODY))
            replies.append(_read_all(extra))  # a reset here would raise ConnectionResetError
            extra.close()
        for reply in replies:
            head, _, body = reply.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 "), reply
            assert b"retry-after: 1" in head.lower()
            assert "kraft.http.max.connections" in json.loads(body)["error"]
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.1)
    # Once the held ones are gone, new clients are served again.
    assert _append(small) == 200


def test_a_silent_connection_is_closed_after_the_header_timeout(small: ServerHandle) -> None:
    sock = _connect(small)
    started = time.monotonic()
    assert _read_all(sock) == b""  # closed without an answer: no request had begun
    waited = time.monotonic() - started
    sock.close()
    assert 0.4 <= waited < 3.0


def _trickled(sock: socket.socket, data: bytes, every_s: float) -> bytes:
    """Send ``data`` one byte per ``every_s`` (each byte well inside the timeout, the whole far
    beyond it) while reading what the server answers until it closes; the answer."""
    closed = threading.Event()

    def trickle() -> None:
        for byte in data:
            if closed.is_set():
                return
            try:
                sock.send(bytes([byte]))
            except OSError:
                return
            time.sleep(every_s)

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        return _read_all(sock)
    finally:
        closed.set()
        sender.join(5)
        sock.close()


def test_headers_sent_a_byte_at_a_time_get_408(small: ServerHandle) -> None:
    request = b"POST /v1/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    reply = _trickled(_connect(small), request, 0.05)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert "kraft.http.header.timeout.ms" in json.loads(body)["error"]


def test_a_body_sent_a_byte_at_a_time_gets_408(small: ServerHandle) -> None:
    sock = _connect(small)
    sock.sendall(b"POST /v1/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(BODY))
    reply = _trickled(sock, BODY, 0.1)  # the whole body would take 2 s; the timeout is 0.5 s
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), reply
    assert "body" in json.loads(body)["error"]


def test_a_slow_answer_is_not_a_header_timeout() -> None:
    """The timeout covers the client's headers, not the server's answer: an append held longer
    than the timeout, on a keep-alive connection, is answered, and the connection serves again."""
    backend = InMemoryTestBackend()
    backend.hold = threading.Event()
    handle = _serve(HttpLimits(max_connections=3, header_timeout_s=0.3), backend)
    try:
        conn = http.client.HTTPConnection(handle.host, handle.port, timeout=10)
        conn.request("POST", "/v1/records", BODY, {"Content-Type": "application/json"})
        assert backend.entered.wait(5)
        time.sleep(1.0)  # three header timeouts while the server computes its answer
        backend.hold.set()
        first = conn.getresponse()
        first.read()
        conn.request("POST", "/v1/records", BODY, {"Content-Type": "application/json"})
        second = conn.getresponse()
        second.read()
        conn.close()
        assert (first.status, second.status) == (200, 200)
        assert len(backend.log) == 2
    finally:
        handle.stop()


def test_a_request_pipelined_behind_a_slow_answer_is_not_timed_out() -> None:
    """Bytes that arrive while a request is being answered start no deadline: the second
    request, sent at once behind the first, waits for the server, not for the client."""
    backend = InMemoryTestBackend()
    backend.hold = threading.Event()
    handle = _serve(HttpLimits(max_connections=3, header_timeout_s=0.3), backend)
    sock = _connect(handle)
    try:
        request = (b"POST /v1/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
        sock.sendall(request + request[:-3])  # the second one's last bytes come later
        assert backend.entered.wait(5)
        time.sleep(0.5)
        sock.sendall(request[-3:])
        time.sleep(1.0)  # three timeouts after those bytes, the first request still held
        backend.hold.set()
        received = b""
        while received.count(b"HTTP/1.1 200 ") < 2:
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
        assert len(backend.log) == 2
    finally:
        sock.close()
        handle.stop()


def test_a_long_streamed_answer_and_a_late_reader_are_not_timed_out() -> None:
    """The body deadline counts only the application's waits for the client: a handler that
    reads a large body late (uvicorn stops reading meanwhile), and a response streamed for
    longer than the timeout while the app listens for the disconnect, both complete."""
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await asyncio.sleep(0.8)  # busy before reading: the server's time
        size, more = 0, True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(4):  # 0.8 s of streaming, the app waiting for the disconnect meanwhile
            waiter = asyncio.ensure_future(receive())
            await asyncio.sleep(0.2)
            assert not waiter.done()
            waiter.cancel()
            await send({"type": "http.response.body", "body": b"%d;" % size,
                        "more_body": True})
        await send({"type": "http.response.body", "body": b"end"})

    handle = serve_in_thread(app, limits=HttpLimits(max_connections=3, header_timeout_s=0.3))
    try:
        conn = http.client.HTTPConnection(handle.host, handle.port, timeout=10)
        big = b"x" * 300_000  # beyond what uvicorn buffers before it stops reading
        conn.request("POST", "/", big, {"Content-Type": "application/octet-stream"})
        response = conn.getresponse()
        assert (response.status, response.read()) == (200, b"300000;" * 4 + b"end")
        conn.close()
    finally:
        handle.stop()


def test_well_behaved_clients_are_untouched(small: ServerHandle) -> None:
    conn = http.client.HTTPConnection(small.host, small.port, timeout=5)
    try:
        statuses = []
        for _ in range(5):  # keep-alive requests, each well within the timeout
            conn.request("POST", "/v1/records", BODY, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            statuses.append(response.status)
            time.sleep(0.2)
        assert statuses == [200] * 5
    finally:
        conn.close()


def test_the_limits_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        HttpLimits(max_connections=0)
    with pytest.raises(ValueError, match="header_timeout_s"):
        HttpLimits(header_timeout_s=0)
    # Each listener counts its own refusals.
    assert ListenerLimits(HttpLimits()).refused is not ListenerLimits(HttpLimits()).refused


def test_node_config_reads_the_http_limits() -> None:
    base = {"node.id": "0", "log.dirs": "/tmp/x", "controller.quorum.voters": "0@127.0.0.1:9093"}
    cfg = NodeConfig.from_properties({**base, "kraft.http.max.connections": "7",
                                      "kraft.http.header.timeout.ms": "2500"})
    assert (cfg.http_max_connections, cfg.http_header_timeout_ms) == (7, 2500)
    defaults = NodeConfig.from_properties(base)
    assert (defaults.http_max_connections, defaults.http_header_timeout_ms) == (1000, 10_000)
    # net.config keeps its own copy of api.limits' defaults (it must not import uvicorn).
    assert HttpLimits() == HttpLimits(defaults.http_max_connections,
                                      defaults.http_header_timeout_ms / 1000)
    with pytest.raises(ConfigError, match=r"kraft\.http\.max\.connections"):
        NodeConfig.from_properties({**base, "kraft.http.max.connections": "0"})
    with pytest.raises(ConfigError, match=r"kraft\.http\.header\.timeout\.ms"):
        NodeConfig.from_properties({**base, "kraft.http.header.timeout.ms": "soon"})
