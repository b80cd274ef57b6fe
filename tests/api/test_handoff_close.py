"""``CloseHandedOverWhenDeposed``: a connection handed over by the router (accepted on another
port than this API's) is closed after its answer once this node does not lead; every other
connection, and every connection while it leads, is left alone."""

from __future__ import annotations

import asyncio
from typing import Any

from api.handoff_close import CloseHandedOverWhenDeposed

OWN_PORT = 29200
ROUTER_PORT = 8080


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


def headers_of(port: int, leads: bool) -> list[tuple[bytes, bytes]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    middleware = CloseHandedOverWhenDeposed(app, OWN_PORT, lambda: leads)
    scope = {"type": "http", "method": "POST", "path": "/v1/records",
             "server": ("127.0.0.1", port)}
    asyncio.run(middleware(scope, receive, send))
    assert sent[1] == {"type": "http.response.body", "body": b"{}"}
    return list(sent[0]["headers"])


def test_a_handed_over_connection_is_closed_once_this_node_does_not_lead() -> None:
    assert (b"connection", b"close") in headers_of(ROUTER_PORT, leads=False)


def test_other_connections_and_a_leader_keep_theirs() -> None:
    assert (b"connection", b"close") not in headers_of(ROUTER_PORT, leads=True)
    assert (b"connection", b"close") not in headers_of(OWN_PORT, leads=False)
    assert (b"connection", b"close") not in headers_of(OWN_PORT, leads=True)
