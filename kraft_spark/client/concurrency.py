"""Locks and leader election on the store, as etcd's client ``concurrency`` package does them:
leases, conditional writes and watches only.

**Lock** (``async with kv.lock("jobs/compaction") as held``): grant a lease and keep it alive;
create ``<name>/<lease id>`` attached to it (only if absent); the holder is the key created
first (smallest ``create_offset``). A waiter watches only the key created just before its own
(fair queueing in creation order, no thundering herd: one deletion wakes one waiter). The
holder's **fencing token** is its key's ``create_offset``, which only grows from one holder to
the next. A holder that is paused past its TTL loses its lease and its key; give the resource
you protect the token, or make your writes to the store conditional on the lock key still being
yours (``held.fence()``): a stale holder's writes are then refused.

**Election** (``Election(kv, "svc/leader")``): ``campaign(value)`` waits to become the leader
(the same queue as a lock), ``leader()`` tells who leads, ``observe()`` follows changes,
``resign()`` steps down.

**Losing it.** The lease is kept alive by a ``kraft_spark.client.session.Session``: a holder
that cannot reach the quorum learns it lost the lock once the TTL has passed by its own clock
since the last acknowledged keep-alive (or at once on a 404), without waiting to reconnect:
``held.lost`` is set, ``held.stale`` is true and ``held.reason`` says why. From then on its
token may have been superseded: stop using the resource (``await held.wait_lost()`` in a task
beside the work, as ``kraft-spark lock`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from kraft_spark.client.kv_types import KeyValue, KvError, LeaseInfo, WatchEvent, WriteResult
from kraft_spark.client.session import Session


class KvLike(Protocol):
    """What the recipes need of ``kraft_spark.client.kv.KvLike``."""

    async def grant_lease(self, ttl_ms: int) -> LeaseInfo: ...

    async def keep_alive(self, lease_id: int, *, timeout_s: float | None = None
                         ) -> LeaseInfo: ...

    async def revoke_lease(self, lease_id: int) -> None: ...

    async def put(self, key: str, value: Any, *, if_version: int | None = None,
                  if_mod_offset: int | None = None, if_absent: bool = False,
                  lease_id: int | None = None) -> WriteResult: ...

    async def range(self, prefix: str = "", *, limit: int = 1000,
                    consistency: Any = "linearizable") -> list[KeyValue]: ...

    async def range_at(self, prefix: str = "", *, consistency: Any = "linearizable"
                       ) -> tuple[list[KeyValue], int]: ...

    def watch(self, *, key: str | None = None, prefix: str | None = None,
              from_offset: int | None = None) -> AsyncIterator[WatchEvent]: ...

log = logging.getLogger(__name__)

# A watch that failed (a node down): wait this long before reading the state again.
WATCH_RETRY_S = 0.2


@dataclass(slots=True)
class Held:
    """A lock (or a leadership) held: its key, fencing token and lease. ``lost`` is set when
    the lease is or may be gone (a 404, or its TTL passed by this process's clock since the last
    acknowledged keep-alive): from then on the token is **stale**, another holder may have the
    lock."""

    key: str
    token: int
    lease_id: int
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    session: Session | None = None

    @property
    def stale(self) -> bool:
        """True once the lock may be someone else's (``lost`` is set)."""
        return self.lost.is_set()

    @property
    def reason(self) -> str | None:
        """Why it was lost (None while held)."""
        if not self.lost.is_set():
            return None
        return self.session.reason if self.session is not None else "lost"

    async def wait_lost(self) -> str:
        """Wait until the lock is lost; the reason."""
        await self.lost.wait()
        return self.reason or "lost"

    def fence(self) -> dict[str, Any]:
        """A condition for a write that must only apply while this is still held."""
        return {"key": self.key, "mod_offset": self.token}


class _Queue:
    """One place in a queue of keys under ``prefix``, in creation order."""

    def __init__(self, kv: KvLike, prefix: str, ttl_ms: int) -> None:
        self.kv = kv
        self.prefix = prefix.rstrip("/") + "/"
        self.ttl_ms = ttl_ms
        self.held: Held | None = None
        self.session: Session | None = None

    async def join(self, value: Any) -> Held:
        session = self.session = await Session(self.kv, self.ttl_ms).start()
        key = f"{self.prefix}{session.lease_id:016x}"
        try:
            await self.kv.put(key, value, if_absent=True, lease_id=session.lease_id)
            while True:
                if session.lost.is_set():
                    raise KvError(410, f"{key} is gone while waiting: {session.reason}", {})
                queue = sorted(await self.kv.range(self.prefix),
                               key=lambda kv: kv.create_offset)
                mine = next((kv for kv in queue if kv.key == key), None)
                if mine is None:
                    raise KvError(410, f"{key} is gone: the lease expired while waiting", {})
                ahead = [kv for kv in queue if kv.create_offset < mine.create_offset]
                if not ahead:
                    self.held = Held(key, mine.create_offset, session.lease_id, session.lost,
                                     session)
                    return self.held
                waiting = asyncio.ensure_future(self._wait_deleted(ahead[-1], mine.offset))
                lost = asyncio.ensure_future(session.lost.wait())
                try:
                    await asyncio.wait({waiting, lost}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (waiting, lost):
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
        except BaseException:
            await self._leave()
            raise

    async def _wait_deleted(self, before: KeyValue, from_offset: int) -> None:
        """Until the key just ahead in the queue is deleted (released, or its lease expired),
        or the watch ends some other way (the caller reads the queue again then)."""
        try:
            async for event in self.kv.watch(key=before.key, from_offset=from_offset):
                if event.type in ("delete", "cancelled"):
                    return
        except KvError as exc:
            if exc.status != 410:  # the log start moved past from_offset: read again
                raise
        except httpx.TransportError as exc:  # a node went: read again (another one)
            log.info("watch of %s failed: %s", before.key, exc)
            await asyncio.sleep(WATCH_RETRY_S)

    async def _leave(self) -> None:
        if self.session is not None:
            await self.session.close()  # revokes: deletes the key, the next waiter goes
            self.session = None
        self.held = None

    async def leave(self) -> None:
        await self._leave()


class Lock(_Queue):
    """``async with kv.lock(name, ttl_ms=...) as held:`` (see the module doc)."""

    def __init__(self, kv: KvLike, name: str, *, ttl_ms: int = 10_000) -> None:
        super().__init__(kv, name, ttl_ms)

    async def acquire(self) -> Held:
        return await self.join("locked")

    async def release(self) -> None:
        await self.leave()

    async def __aenter__(self) -> Held:
        return await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        await self.release()


class Election(_Queue):
    """Leader election on ``name`` (see the module doc)."""

    def __init__(self, kv: KvLike, name: str, *, ttl_ms: int = 10_000) -> None:
        super().__init__(kv, name, ttl_ms)

    async def campaign(self, value: Any) -> Held:
        """Wait until this candidate leads; its value is what ``leader()`` tells others."""
        return await self.join(value)

    async def resign(self) -> None:
        await self.leave()

    async def leader(self) -> KeyValue | None:
        queue = await self.kv.range(self.prefix)
        return min(queue, key=lambda kv: kv.create_offset, default=None)

    async def _leader_at(self) -> tuple[KeyValue | None, int]:
        """The leader and the offset the read reflects (every write below it is in it)."""
        queue, offset = await self.kv.range_at(self.prefix)
        return min(queue, key=lambda kv: kv.create_offset, default=None), offset

    async def observe(self) -> AsyncIterator[KeyValue | None]:
        """The leader now, then each time it changes.

        The watch starts at the offset the first read reflects, so no change between the two
        is missed. When it cannot go on from there (410: the log start moved past it, as it
        does after a snapshot; the server cancelled the watch; a node went away), the leader is
        read again (and told if it changed meanwhile) and a new watch starts at that read's
        offset: again nothing between is missed, whatever the log lost below it."""
        current, offset = await self._leader_at()
        yield current
        while True:
            started = offset
            try:
                async for event in self.kv.watch(prefix=self.prefix, from_offset=offset):
                    if event.type == "cancelled":
                        break
                    if event.type not in ("put", "delete"):
                        continue
                    now, offset = await self._leader_at()
                    if _changed(current, now):
                        current = now
                        yield current
            except KvError as exc:
                if exc.status != 410:
                    raise
                log.info("observing %s: %s; reading the leader again", self.prefix, exc)
            except httpx.TransportError as exc:
                log.info("observing %s: %s; reading the leader again", self.prefix, exc)
            now, offset = await self._leader_at()
            if _changed(current, now):
                current = now
                yield current
            if offset <= started:  # no progress: give the nodes time (not a busy loop)
                await asyncio.sleep(WATCH_RETRY_S)


def _changed(before: KeyValue | None, now: KeyValue | None) -> bool:
    """Another leader (or none, or one where there was none): compared by key."""
    return (before.key if before is not None else None) != (
        now.key if now is not None else None)
