"""The HTTP API a node may serve (``kraft.http.listener``), as the node sees it.

The node does not import the web layer: ``kraft-spark node`` hands it a factory
(``api.node_http.serve_node_http``) that starts the API on the node's loop once its state is
loaded; the node stops it first when it stops.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from kraft_spark.net.config import NodeConfig
from kraft_spark.net.local_requests import LocalNode


class EmbeddedHttpServer(Protocol):
    """A running HTTP API of a node."""

    @property
    def url(self) -> str: ...

    async def stop(self) -> None: ...


# Starts the HTTP API for a node from its configuration (``api.node_http.serve_node_http``).
EmbeddedHttpFactory = Callable[[LocalNode, NodeConfig], Awaitable[EmbeddedHttpServer]]

__all__ = ["EmbeddedHttpFactory", "EmbeddedHttpServer"]
