"""Where the answer to a request from a connection goes (``Token``), and the small helpers of
the node's message handling; requests made in this process are ``local_requests``'."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from kraft_spark.net.config import NodeConfig
from kraft_spark.net.frame_server import ServerConnection
from kraft_spark.net.local_requests import LocalNode
from kraft_spark.protocol import ApiKey, RequestHeader, decode_response
from kraft_spark.protocol.fast_wire import FETCH_VERSION, decode_fetch_response
from kraft_spark.protocol.wire import response_from_wire
from kraft_spark.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    Request,
    Response,
    VoteRequest,
)


def wall_ms() -> int:
    return int(time.time() * 1000)


class Token:
    """Where to send the answer to one inbound request."""

    __slots__ = ("api_key", "api_version", "conn", "correlation_id")

    def __init__(self, conn: ServerConnection, header: RequestHeader) -> None:
        self.conn = conn
        self.api_key = header.api_key
        self.api_version = header.api_version
        self.correlation_id = header.correlation_id


class EmbeddedHttpServer(Protocol):
    """The HTTP API a node serves (``kraft.http.listener``), as the node sees it."""

    @property
    def url(self) -> str: ...

    async def stop(self) -> None: ...


# Starts the HTTP API for a node from its configuration (``api.node_http.serve_node_http``).
EmbeddedHttpFactory = Callable[[LocalNode, NodeConfig], Awaitable[EmbeddedHttpServer]]

FETCH = int(ApiKey.FETCH)


def decode_fetch_reply(payload: bytes) -> Response:
    fast = decode_fetch_response(payload)
    if fast is not None:
        return fast
    return response_from_wire(FETCH, decode_response(FETCH, FETCH_VERSION, payload)[1])


def request_source(message: Request) -> int:
    if isinstance(message, FetchRequest):
        return message.replica_id
    if isinstance(message, VoteRequest):
        return message.candidate_id
    if isinstance(message, BeginQuorumEpochRequest | EndQuorumEpochRequest):
        return message.leader_id
    return -1


__all__ = [
    "EmbeddedHttpFactory",
    "EmbeddedHttpServer",
    "Token",
    "decode_fetch_reply",
    "request_source",
    "wall_ms",
]
