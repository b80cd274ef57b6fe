"""The voters' lease expirer: the leader's countdowns (``kraft_spark.store.lease_clock``, whose
docstring says why they are safe) run on the node's loop; every ``TICK_S`` while the node
leads, the leases whose countdown ran out are expired and the remaining TTLs due a checkpoint
are checkpointed, by one append to its own core. Its lease desk
(``kraft_spark.store.lease_keepalive``) answers keep-alives and TimeToLive from the same clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from kraft_spark.net.local_requests import local_answer
from kraft_spark.raft.messages import ProduceRequest
from kraft_spark.store.lease_clock import (
    RESEND_AFTER_S,
    LeaseClock,
    checkpoint_record,
    expire_records,
)
from kraft_spark.store.lease_keepalive import DeskNode, LeaseDesk

log = logging.getLogger(__name__)

__all__ = ["RESEND_AFTER_S", "ExpiringNode", "LeaseClock", "LeaseExpirer", "expire_records"]


class _Core(Protocol):
    @property
    def epoch(self) -> int: ...


class ExpiringNode(DeskNode, Protocol):
    """What the expirer needs of a ``RaftNode``."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def core(self) -> _Core: ...


class LeaseExpirer:
    """Runs a voter's ``LeaseClock`` on its loop: while the node leads, every ``TICK_S`` the
    leases whose countdown ran out are expired by one append to its own core (only a leader
    expires, so nothing is forwarded). Started for every voter (``kraft-spark node``, the
    Spark application's executors), with or without an HTTP API."""

    TICK_S = 0.1

    def __init__(self, node: ExpiringNode, clock: LeaseClock | None = None) -> None:
        self._node = node
        self.clock = clock or LeaseClock()
        self.desk = LeaseDesk(node, self.clock)
        self.expired = 0
        self.checkpointed = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LeaseExpirer:
        self.desk.attach()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="lease-expiry")
        return self

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.TICK_S)
            node = self._node
            try:
                term = node.core.epoch if node.is_leader else None
                table = node.keeper.state.leases
            except AssertionError:  # the node stopped (no core or keeper any more)
                return
            due = self.clock.tick(term, table)
            remaining = self.clock.checkpoints(term, table)
            if not due and not remaining:
                continue
            now_ms = int(time.time() * 1000)
            records = (*expire_records(due, now_ms),
                       *((checkpoint_record(remaining, now_ms),) if remaining else ()))
            try:
                await local_answer(node, ProduceRequest(records, timeout_ms=5000))
                self.expired += len(due)
                self.checkpointed += len(remaining)
            except Exception as exc:  # leadership moved or the node stops: the clock resends
                log.info("expiring leases %s, checkpointing %d: %s", [i for i, _ in due],
                         len(remaining), exc)

    def stop(self) -> None:
        self.desk.detach()
        if self._task is not None:
            self._task.cancel()
