"""A lease kept alive, and its holder's own view of whether it still has it: etcd's
``concurrency.Session`` (whose ``Done()`` channel closes when the lease is lost).

The quorum's leader expires a lease once no keep-alive reached it for the TTL, by the leader's
clock. A holder cut off from every node (its node frozen, its connection cut) cannot hear
that, so it must decide by **its own clock**: the lease is lost once the TTL has passed since
the *sending* of the last keep-alive that was acknowledged (or of the grant). The server
restarted its countdown no earlier than it received that request, hence no earlier than it was
sent, so by then the leader may have expired the lease and a new holder may hold the lock,
never before (clock rates apart: ``CLOCK_BOOTTIME`` counts a suspended machine's sleep, as the
servers' clocks do, where ``time.monotonic`` would not). A 404 to a keep-alive says the same at
once. Either way ``lost`` is set for good: the session never comes back, even if a later
keep-alive would still find the lease (a new leader restarts countdowns), since the holder
cannot know that nobody took over in between.

Keep-alives go every TTL/3, as etcd's do. Each attempt gives a node TTL/6 to answer
(``keep_alive(timeout_s=...)``) before the client moves on to its next endpoint
(``kraft_spark.client.endpoints``), so a dead or frozen node is abandoned well within TTL/3 of
the keep-alive falling due and the lease lives on through any node that answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from kraft_spark.client.kv_types import KvError, LeaseInfo

__all__ = ["Session", "own_clock"]

log = logging.getLogger(__name__)

# Between two rounds of failed attempts (every endpoint refused at once): at most this long.
RETRY_PAUSE_S = 0.2


def own_clock() -> float:
    """Seconds on a clock that never jumps and counts suspended time (see the module doc)."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # not Linux
        return time.monotonic()


class LeaseKv(Protocol):
    async def grant_lease(self, ttl_ms: int) -> LeaseInfo: ...

    async def keep_alive(self, lease_id: int, *, timeout_s: float | None = None
                         ) -> LeaseInfo: ...

    async def revoke_lease(self, lease_id: int) -> None: ...


class Session:
    """``await Session(kv, ttl_ms).start()`` grants a lease and keeps it alive until
    ``close()``; ``lost`` is set (for good) when the lease is or may be gone, ``reason`` says
    why, ``expires_at`` (on ``own_clock``) is when it will be unless a keep-alive is
    acknowledged before."""

    def __init__(self, kv: LeaseKv, ttl_ms: int, *,
                 clock: Callable[[], float] = own_clock) -> None:
        self.kv = kv
        self.ttl_ms = ttl_ms
        self.clock = clock
        self.lease_id = 0
        self.expires_at = 0.0
        self.lost = asyncio.Event()
        self.reason: str | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def ttl_s(self) -> float:
        return self.ttl_ms / 1000

    @property
    def attempt_timeout_s(self) -> float:
        """How long one node has to answer one keep-alive before the next is tried."""
        return self.ttl_s / 6

    def remaining_s(self) -> float:
        """Own-clock seconds left before the lease may have expired (0 once lost)."""
        return 0.0 if self.lost.is_set() else max(0.0, self.expires_at - self.clock())

    async def start(self) -> Session:
        sent = self.clock()
        lease = await self.kv.grant_lease(self.ttl_ms)
        self.lease_id = lease.lease_id
        self.expires_at = sent + self.ttl_s
        self._task = asyncio.ensure_future(self._keep_alive())
        return self

    async def done(self) -> str:
        """Wait until the lease is lost; the reason."""
        await self.lost.wait()
        return self.reason or "lost"

    def _lose(self, reason: str) -> None:
        if not self.lost.is_set():
            self.reason = reason
            log.warning("lease %d lost: %s", self.lease_id, reason)
            self.lost.set()

    async def _keep_alive(self) -> None:
        interval = self.ttl_s / 3
        last_sent = self.expires_at - self.ttl_s
        while True:
            await asyncio.sleep(max(0.0, last_sent + interval - self.clock()))
            while True:  # until acknowledged, or the lease is gone
                sent = self.clock()
                left = self.expires_at - sent
                if left <= 0:
                    self._lose(f"no keep-alive acknowledged within the TTL ({self.ttl_ms} ms "
                               "by this process's clock): the quorum may have expired it")
                    return
                try:
                    # wait_for: whatever the transport does, the deadline is checked on time
                    await asyncio.wait_for(
                        self.kv.keep_alive(self.lease_id, timeout_s=self.attempt_timeout_s),
                        left)
                except KvError as exc:
                    if exc.status == 404:
                        self._lose("the quorum expired or revoked it (404)")
                        return
                    log.info("keep-alive of lease %d refused: %s", self.lease_id, exc)
                except Exception as exc:  # every node failed: the TTL leaves room
                    log.info("keep-alive of lease %d failed: %s", self.lease_id, exc)
                else:
                    self.expires_at = sent + self.ttl_s
                    last_sent = sent
                    break
                pause = min(RETRY_PAUSE_S, self.expires_at - self.clock())
                if pause > 0:
                    await asyncio.sleep(pause)

    async def close(self, *, revoke: bool = True) -> None:
        """Stop the keep-alives; ``revoke``: end the lease now (its keys go with it) rather
        than at its expiry, when a node answers."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if revoke and self.lease_id:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.kv.revoke_lease(self.lease_id),
                                       max(self.ttl_s, 1.0))
