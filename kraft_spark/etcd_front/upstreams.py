"""The nodes a front forwards to, and which one a call goes to.

As etcd's gRPC proxy: calls go to one node (the first of the list that is not resting) until
it fails, then to the next. A node fails when a call could not reach it (its connection could
not be made or broke); it then rests ``REST_S`` before it is chosen first again, so a dead node
costs one failed connection attempt per rest, not one per call. The list is the parent's (the
Spark driver puts the leader's node first, a write then takes no forwarding hop on the node);
a list that changes keeps the channels of the nodes still in it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import grpc

log = logging.getLogger(__name__)

REST_S: Final = 1.0
# The front decodes nothing: message sizes are the node's to limit (etcd's server takes
# requests up to 1.5 MiB, and its clients accept answers of any size).
CHANNEL_OPTIONS: Final = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    # A node that was killed refuses at once; do not back off for a second before trying it
    # again once it is back.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
)


@dataclass(slots=True)
class Upstream:
    address: str
    channel: grpc.aio.Channel
    resting_until: float = 0.0
    failures: int = field(default=0)


class Upstreams:
    def __init__(self, addresses: Sequence[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._nodes: dict[str, Upstream] = {}
        self._order: list[str] = []
        self.set(addresses)

    def set(self, addresses: Sequence[str]) -> None:
        """The nodes, in order of preference; channels of dropped nodes are closed by
        ``close_dropped`` (a call in flight on one finishes first)."""
        kept = {a: self._nodes[a] for a in addresses if a in self._nodes}
        for address in addresses:
            if address not in kept:
                kept[address] = Upstream(address, grpc.aio.insecure_channel(
                    address, options=list(CHANNEL_OPTIONS)))
        self._dropped = [n for a, n in self._nodes.items() if a not in kept]
        self._nodes = kept
        self._order = list(dict.fromkeys(addresses))

    async def close_dropped(self) -> None:
        dropped, self._dropped = self._dropped, []
        for node in dropped:
            await node.channel.close(grace=5.0)

    def candidates(self) -> list[Upstream]:
        """Every node, the ones not resting first (each group in the list's order): a call
        tries them in turn until one is reached."""
        now = self._clock()
        nodes = [self._nodes[a] for a in self._order]
        return ([n for n in nodes if n.resting_until <= now]
                + [n for n in nodes if n.resting_until > now])

    def failed(self, node: Upstream) -> None:
        now = self._clock()
        if node.resting_until <= now:  # said once per rest, not once per call
            log.warning("etcd front: %s cannot be reached; calls go to the next node for "
                        "%.0f s", node.address, REST_S)
        node.failures += 1
        node.resting_until = now + REST_S

    def reached(self, node: Upstream) -> None:
        node.resting_until = 0.0

    @property
    def addresses(self) -> list[str]:
        return list(self._order)

    async def close(self) -> None:
        for node in [*self._nodes.values(), *self._dropped]:
            await node.channel.close(grace=None)
        self._nodes, self._dropped, self._order = {}, [], []
