"""The HTTP servers accept through ``EagerAcceptor`` (``api.server.EagerAcceptServer``): a burst
of clients connecting at once is served, every request answered, and stopping the server stops
the acceptor before the socket closes. Real uvicorn on 127.0.0.1, real connections."""

from __future__ import annotations

import http.client
import json
import threading

import pytest

from api.app import create_app
from api.server import EagerAcceptServer, serve_in_thread
from tests.api.test_sidecar import InMemoryTestBackend

pytestmark = [pytest.mark.timeout(60), pytest.mark.loop_free]

CLIENTS = 120


def test_a_burst_of_connections_is_served_through_the_eager_acceptor() -> None:
    backend = InMemoryTestBackend()
    handle = serve_in_thread(create_app(backend))
    try:
        server = handle._server
        assert isinstance(server, EagerAcceptServer)
        conns = [http.client.HTTPConnection("127.0.0.1", handle.port, timeout=20)
                 for _ in range(CLIENTS)]
        for conn in conns:
            conn.connect()  # all queued before any request is sent
        answers: list[int] = []
        lock = threading.Lock()

        def append(i: int, conn: http.client.HTTPConnection) -> None:
            conn.request("POST", "/v1/records", json.dumps({"key": f"k{i}", "value": i}),
                         {"Content-Type": "application/json"})
            status = conn.getresponse().status
            with lock:
                answers.append(status)

        threads = [threading.Thread(target=append, args=(i, c)) for i, c in enumerate(conns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert answers == [200] * CLIENTS
        assert sum(a.accepted for a in server._acceptors) == CLIENTS
        for conn in conns:
            conn.close()
    finally:
        handle.stop()
    assert not handle.running
    assert all(not a._reading for a in server._acceptors)
