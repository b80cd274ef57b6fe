"""The driver's observer as a reader of the store: the committed batches the materializer
writes (with the state machine's judgement of each conditional write), and the ``NodeStore``
the application's HTTP endpoint serves reads, write outcomes and watches from (through
``kraft_spark.store.cross_loop``: the endpoint runs on its own loop)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kraft_spark.client.client import AsyncQuorumClient
from kraft_spark.client.security import ClientSecurity
from kraft_spark.net.node import RaftNode
from kraft_spark.store.cross_loop import LoopStore
from kraft_spark.store.service import NodeStore

log = logging.getLogger(__name__)


async def read_committed(node: RaftNode, start: int, limit_records: int
                         ) -> tuple[list[Any], int, dict[int, Any], dict[int, Any]]:
    """Committed batches from ``start`` (up to ``limit_records`` offsets), the high watermark,
    and the failed conditional writes among them: the observer's state has applied everything
    up to where this reads (its keeper applies at each high-watermark move, on this loop), so
    its judgement of each conditional write is known, and the keys its lease revocations and
    expiries deleted. Raises ``OutcomeUnknown`` if the state no longer holds every outcome
    from ``start``, rather than let a failed write be materialized as applied. Runs on the
    observer's loop."""
    state = node.keeper.state
    hw = min(node.high_watermark, state.applied_offset)
    out: list[Any] = []
    offset = start
    while offset < hw and offset - start < limit_records:
        batches = node.log.read(offset, 4 << 20)
        progress_made = False
        for batch in batches:
            if batch.next_offset > hw:
                break
            if batch.base_offset >= offset:
                out.append(batch)
                offset = batch.next_offset
                progress_made = True
        if not progress_made:
            break
    # Complete for [start, offset) or OutcomeUnknown: a failure missing here would be
    # materialized as applied (the state keeps them past the window down to what Delta has
    # materialized: StateKeeper's outcome hold; bootstrap_if_needed moves the tables past a
    # gap it could not keep).
    failed, deleted = state.known_outcomes(start, offset)
    return out, hw, failed, deleted


class ObserverStore:
    """The observer's ``NodeStore``, replaced whenever the driver restarts its observer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cluster_id: Callable[[], str],
                 security: Callable[[], ClientSecurity]) -> None:
        """``security``: how its forwarding client authenticates to the voters."""
        self._loop = loop
        self._cluster_id = cluster_id
        self._security = security
        self._store: NodeStore | None = None
        self._client: AsyncQuorumClient | None = None
        self.loop_store = LoopStore(lambda: self._store, lambda: self._loop)

    async def attach(self, node: RaftNode, voters: dict[int, tuple[str, int]]) -> None:
        """On the observer's loop, once ``node`` started: serve from it; linearizable reads
        ask ``voters``' leader for the read index."""
        await self.detach()
        bootstrap = [f"{host}:{port}" for host, port in voters.values()]

        def forwarder() -> AsyncQuorumClient:
            if self._client is None:
                self._client = AsyncQuorumClient(bootstrap, cluster_id=self._cluster_id(),
                                                 client_id="driver-observer-reads",
                                                 **self._security().client_kwargs())
            return self._client

        self._store = NodeStore(node, forwarder)

    async def detach(self) -> None:
        """On the observer's loop: stop serving (watches end; reads answer 503 until the next
        ``attach``)."""
        store, client = self._store, self._client
        self._store = self._client = None
        if store is not None:
            store.close()
        if client is not None:
            try:
                await client.close()
            except Exception:
                log.exception("closing the observer's read-index client failed")
