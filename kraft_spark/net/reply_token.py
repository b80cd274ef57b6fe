"""Where the answer to a request read from a connection goes (requests made in this process
carry a ``local_requests.LocalToken`` instead), and the wall clock the node hands its core."""

from __future__ import annotations

import time

from kraft_spark.net.frame_server import ServerConnection
from kraft_spark.protocol import RequestHeader


def wall_ms() -> int:
    """Milliseconds since the epoch: the core's clock in a real node (the simulator's is its
    own)."""
    return int(time.time() * 1000)


class Token:
    """Where to send the answer to one inbound request."""

    __slots__ = ("api_key", "api_version", "conn", "correlation_id")

    def __init__(self, conn: ServerConnection, header: RequestHeader) -> None:
        self.conn = conn
        self.api_key = header.api_key
        self.api_version = header.api_version
        self.correlation_id = header.correlation_id


__all__ = ["Token", "wall_ms"]
