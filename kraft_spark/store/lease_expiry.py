"""The leader's countdowns of leases (``kraft_spark.store.leases`` says why this is safe).

Every node keeps a ``LeaseClock``, but only the leader acts on it: each ``tick`` it restarts a
lease's countdown when a newer keep-alive (or the grant) has been applied, and returns the leases
whose countdown ran out, each with the offset of the keep-alive it counted from; the node appends
an ``expire`` record for each. When a node becomes leader it restarts every countdown (etcd's
rule on a leader change): a holder that kept its lease alive through the old leader gets a full
TTL under the new one. Time is the node's monotonic clock (injected), never the wall clock: a
wall-clock jump expires nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from kraft_spark.net.local_requests import LocalSubmitter, local_answer
from kraft_spark.net.state_keeper import StateKeeper
from kraft_spark.raft.messages import ProduceRequest
from kraft_spark.raft.records import Record
from kraft_spark.store.leases import LEASE_OP_HEADER, Lease, encode_op

log = logging.getLogger(__name__)

# An expiry not applied within this long (the append failed, leadership moved) is sent again.
RESEND_AFTER_S = 2.0


class LeaseClock:
    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._leading = False
        self._deadlines: dict[int, float] = {}
        self._counted_from: dict[int, int] = {}  # lease -> keep-alive offset counted from
        self._sent: dict[int, float] = {}  # lease -> when its expiry was sent

    def tick(self, leading: bool, leases: dict[int, Lease]) -> list[tuple[int, int]]:
        """The leases to expire now: (lease id, the keep-alive offset counted from)."""
        if not leading:
            self._leading = False
            return []
        now = self._now()
        if not self._leading:  # just became leader: every countdown starts again
            self._leading = True
            self._deadlines.clear()
            self._counted_from.clear()
            self._sent.clear()
        for lease_id in [i for i in self._deadlines if i not in leases]:
            del self._deadlines[lease_id]
            self._counted_from.pop(lease_id, None)
            self._sent.pop(lease_id, None)
        due: list[tuple[int, int]] = []
        for lease_id, lease in leases.items():
            if self._counted_from.get(lease_id) != lease.keepalive_offset:
                self._counted_from[lease_id] = lease.keepalive_offset
                self._deadlines[lease_id] = now + lease.ttl_ms / 1000
                self._sent.pop(lease_id, None)
            elif self._deadlines[lease_id] <= now:
                sent = self._sent.get(lease_id)
                if sent is None or now - sent >= RESEND_AFTER_S:
                    self._sent[lease_id] = now
                    due.append((lease_id, lease.keepalive_offset))
        return due

    def remaining_ms(self, lease_id: int) -> int | None:
        """Milliseconds left on this leader's countdown (None: not leading or unknown)."""
        deadline = self._deadlines.get(lease_id)
        if not self._leading or deadline is None:
            return None
        return max(0, int((deadline - self._now()) * 1000))


def expire_records(due: list[tuple[int, int]], now_ms: int) -> tuple[Record, ...]:
    """The ``expire`` records of ``LeaseClock.tick``'s answer, each naming the keep-alive its
    countdown ran from (the state machine voids it if a later one landed first)."""
    return tuple(Record(None, None, now_ms,
                        ((LEASE_OP_HEADER, encode_op("expire", lease_id, after=after)),))
                 for lease_id, after in due)


class ExpiringNode(LocalSubmitter, Protocol):
    """What the expirer needs of a ``RaftNode``."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def keeper(self) -> StateKeeper: ...


class LeaseExpirer:
    """Runs a voter's ``LeaseClock`` on its loop: while the node leads, every ``TICK_S`` the
    leases whose countdown ran out are expired by one append to its own core (only a leader
    expires, so nothing is forwarded). Started for every voter (``kraft-spark node``, the
    Spark application's executors), with or without an HTTP API."""

    TICK_S = 0.1

    def __init__(self, node: ExpiringNode, clock: LeaseClock | None = None) -> None:
        self._node = node
        self.clock = clock or LeaseClock()
        self.expired = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> LeaseExpirer:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="lease-expiry")
        return self

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.TICK_S)
            node = self._node
            try:
                due = self.clock.tick(node.is_leader, node.keeper.state.leases.leases)
            except AssertionError:  # the node stopped (no keeper any more)
                return
            if not due:
                continue
            records = expire_records(due, int(time.time() * 1000))
            try:
                await local_answer(node, ProduceRequest(records, timeout_ms=5000))
                self.expired += len(due)
            except Exception as exc:  # leadership moved or the node stops: the clock resends
                log.info("expiring leases %s: %s", [i for i, _ in due], exc)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
