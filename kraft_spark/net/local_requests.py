"""Requests made to a node from its own process (``RaftNode.submit_local``): the embedded HTTP
API, the store and the lease expiry hand the core a client request (Produce, a client Fetch,
DescribeQuorum, ReadIndex) as if it came from a connection, and get the core's answer through
a callback instead of a socket.

One way in: ``submit_local(message, callback)``; ``local_answer`` is the same for a coroutine
(a future settled by that callback). Kept apart from ``node`` so the modules that only need
these names (the local appends, the node backend, the store) do not import the node itself.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Protocol

from kraft_spark.aio import settle_future
from kraft_spark.net.config import NodeConfig
from kraft_spark.raft.messages import (
    DescribeQuorumRequest,
    FetchRequest,
    ProduceRequest,
    ReadIndexRequest,
    Response,
)

log = logging.getLogger("kraft_spark.net.node")

LocalRequest = ProduceRequest | FetchRequest | DescribeQuorumRequest | ReadIndexRequest

# Told the answer to a local request (or, with None, why there is none), synchronously.
LocalCallback = Callable[[Response | None, BaseException | None], None]


class NodeStoppedError(Exception):
    """The node stopped (or failed) before it answered a local request; a Produce among them
    may still have been appended."""


class LocalToken:
    """Where the core's answer to one local request goes: its callback, called once."""

    __slots__ = ("callback",)

    def __init__(self, callback: LocalCallback) -> None:
        self.callback = callback

    def settle(self, response: Response | None, error: BaseException | None) -> None:
        try:
            self.callback(response, error)
        except Exception:  # the caller's bug must not cost the rest of the Ready
            log.exception("a local request's callback failed")


class LocalSubmitter(Protocol):
    def submit_local(self, message: LocalRequest, callback: LocalCallback) -> None: ...


class LocalNode(LocalSubmitter, Protocol):
    """What the local-append path and the embedded HTTP API need of a ``RaftNode``: they
    depend on this interface, not on the node module (which starts them)."""

    cluster_id: str

    @property
    def config(self) -> NodeConfig: ...

    @property
    def is_leader(self) -> bool: ...


def local_answer(node: LocalSubmitter, message: LocalRequest) -> asyncio.Future[Response]:
    """``node.submit_local`` for a coroutine: a future of the core's answer, failed with
    ``NodeStoppedError`` if the node stops first (raised at once if it is not running).
    Cancelling the future only stops waiting: a Produce already handed over stays in the log."""
    future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
    node.submit_local(message, functools.partial(settle_future, future))
    return future


__all__ = ["LocalCallback", "LocalNode", "LocalRequest", "LocalSubmitter", "LocalToken",
           "NodeStoppedError", "local_answer"]
