"""Where the answers to a node's requests go, and the small helpers of its message handling.

``Token`` answers a request from a connection; ``LocalToken`` one made in this process
(``RaftNode.submit_local``), through a future or a callback. Kept apart from ``node`` so the
modules that only need these names (the local appends, the node backend) do not import the
node itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from kraft_spark.net.config import NodeConfig
from kraft_spark.net.frame_server import ServerConnection
from kraft_spark.protocol import ApiKey, RequestHeader, decode_response
from kraft_spark.protocol.fast_wire import FETCH_VERSION, decode_fetch_response
from kraft_spark.protocol.wire import response_from_wire
from kraft_spark.raft.messages import (
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    ProduceRequest,
    ReadIndexRequest,
    Request,
    Response,
    VoteRequest,
)

log = logging.getLogger("kraft_spark.net.node")

LocalRequest = ProduceRequest | FetchRequest | DescribeQuorumRequest | ReadIndexRequest


class NodeStoppedError(Exception):
    """The node stopped (or failed) before it answered a local request; a Produce among them
    may still have been appended."""


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


# Told the answer to a local request (or, with None, why there is none), synchronously.
LocalCallback = Callable[[Response | None, BaseException | None], None]


class LocalToken:
    """Where to send the answer to one request made in this process: an asyncio future, or a
    callback (``submit_local_callback``)."""

    __slots__ = ("callback", "future")

    def __init__(self, future: asyncio.Future[Response] | None,
                 callback: LocalCallback | None = None) -> None:
        self.future = future
        self.callback = callback

    def settle(self, response: Response | None, error: BaseException | None) -> None:
        if self.callback is not None:
            try:
                self.callback(response, error)
            except Exception:  # the caller's bug must not cost the rest of the Ready
                log.exception("a local request's callback failed")
            return
        future = self.future
        if future is None or future.done():  # else the caller stopped waiting
            return
        if error is not None:
            future.set_exception(error)
        else:
            assert response is not None
            future.set_result(response)



class LocalNode(Protocol):
    """What the local-append path and the embedded HTTP API need of a ``RaftNode``: they
    depend on this interface, not on the node module (which starts them)."""

    cluster_id: str

    @property
    def config(self) -> NodeConfig: ...

    @property
    def is_leader(self) -> bool: ...

    def submit_local(self, message: LocalRequest) -> asyncio.Future[Response]: ...

    def submit_local_callback(self, message: LocalRequest, callback: LocalCallback) -> None: ...


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
    "LocalCallback",
    "LocalNode",
    "LocalRequest",
    "LocalToken",
    "NodeStoppedError",
    "Token",
    "decode_fetch_reply",
    "request_source",
    "wall_ms",
]
