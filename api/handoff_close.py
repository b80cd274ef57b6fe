"""Closing handed-over connections at a node that no longer leads.

The append router hands a connection whose first request is an append to the leader's process
when it runs on the router's host (``kraft_spark.proxy.triage``). Such a connection was
accepted on the router's address, so its ASGI scope's ``server`` is that address, not this
API's. While this node leads, it is served like any other. Once this node does not lead, every
answer on it carries ``Connection: close`` (uvicorn closes the connection after it), so the
client's next connection goes through the router to the leader of now, instead of each of its
appends being forwarded from here for as long as the connection lives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CLOSE: Final = (b"connection", b"close")


class CloseHandedOverWhenDeposed:
    """ASGI middleware; ``own_port``: the port this API listens on; ``leads``: whether this
    node leads now."""

    def __init__(self, app: ASGIApp, own_port: int, leads: Callable[[], bool]) -> None:
        self.app = app
        self._own_port = own_port
        self._leads = leads

    def _handed_over(self, scope: Scope) -> bool:
        server = scope.get("server")
        return server is not None and server[1] != self._own_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._handed_over(scope) or self._leads():
            await self.app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), CLOSE]}
            await send(message)

        await self.app(scope, receive, send_closing)


__all__ = ["CloseHandedOverWhenDeposed"]
