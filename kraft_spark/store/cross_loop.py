"""The store of a node on another event loop, for an HTTP server on its own loop: the Spark
driver's endpoint serves reads, conditional-write outcomes and watches from the driver's
observer, which runs on the observer's loop thread.

``LoopStore`` runs each ``NodeStore`` call on the node's loop (``run_coroutine_threadsafe``) and
awaits it on the caller's. ``LoopHub`` opens the watch on the node's loop and relays its items
to the caller's loop through a bounded queue: the relay waits while the queue is full, so a
slow HTTP client holds up only its own watcher, whose hub cuts it off when *its* queue
overflows (the hub never waits).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from kraft_spark.state.machine import FailedTxn
from kraft_spark.store.lease_clock import CountdownAnswer, CountdownRequest
from kraft_spark.store.leases import Lease
from kraft_spark.store.past_reads import PastRead
from kraft_spark.store.service import KvRead, NodeStore
from kraft_spark.store.watch import Cancelled, Watcher, WatchHubClosed, WatchItem

T = TypeVar("T")
RELAY_QUEUE = 256


class StoreUnavailableError(RuntimeError):
    """The node behind the store is not running (restarting, or stopped)."""


class LoopStore:
    """``KvStore`` over ``store()`` (the node's current ``NodeStore``, None while it restarts)
    on ``loop()``."""

    def __init__(self, store: Callable[[], NodeStore | None],
                 loop: Callable[[], asyncio.AbstractEventLoop | None]) -> None:
        self._store = store
        self._loop = loop

    def _target(self) -> tuple[NodeStore, asyncio.AbstractEventLoop]:
        store, loop = self._store(), self._loop()
        if store is None or loop is None or loop.is_closed():
            raise StoreUnavailableError("the observer that serves the store here is restarting:"
                                        " retry in a moment")
        return store, loop

    async def _on(self, loop: asyncio.AbstractEventLoop,
                  coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    async def get(self, key: bytes, *, linearizable: bool, timeout_s: float) -> KvRead:
        store, loop = self._target()
        return await self._on(loop, store.get(key, linearizable=linearizable,
                                              timeout_s=timeout_s))

    async def range(self, prefix: bytes, *, after: bytes | None, limit: int,
                    linearizable: bool, timeout_s: float) -> KvRead:
        store, loop = self._target()
        return await self._on(loop, store.range(prefix, after=after, limit=limit,
                                                linearizable=linearizable, timeout_s=timeout_s))

    async def range_at(self, start: bytes, end: bytes, revision: int, *, after: bytes | None,
                       limit: int, linearizable: bool, timeout_s: float) -> PastRead:
        store, loop = self._target()
        return await self._on(loop, store.range_at(start, end, revision, after=after,
                                                   limit=limit, linearizable=linearizable,
                                                   timeout_s=timeout_s))

    async def outcome(self, base_offset: int, end_offset: int,
                      timeout_s: float) -> FailedTxn | None:
        store, loop = self._target()
        return await self._on(loop, store.outcome(base_offset, end_offset, timeout_s))

    async def leases(self, *, linearizable: bool, timeout_s: float,
                     only: int | None = None) -> tuple[int, list[Lease]]:
        store, loop = self._target()
        return await self._on(loop, store.leases(linearizable=linearizable, timeout_s=timeout_s,
                                                 only=only))

    async def lease_countdown(self, request: CountdownRequest) -> CountdownAnswer:
        store, loop = self._target()
        return await self._on(loop, store.lease_countdown(request))

    def watch_hub(self) -> LoopHub | None:
        found = self._store()
        loop = self._loop()
        if found is None or loop is None:
            return None
        return LoopHub(found, loop)


class LoopHub:
    """A ``WatchHub`` on another loop, as the watch route uses one."""

    def __init__(self, store: NodeStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop

    def watch(self, *, key: bytes | None = None, prefix: bytes | None = None,
              from_offset: int | None = None, from_index: int = 0) -> LoopWatcher:
        hub = self._store.watch_hub()
        if hub is None or hub.closed:
            raise WatchHubClosed("the observer that serves watches here is restarting: watch "
                                 "again in a moment")
        if (key is None) == (prefix is None):
            raise ValueError("watch exactly one of key and prefix")
        return LoopWatcher(self._store, self._loop, key, prefix, from_offset,
                           from_index=from_index)


class LoopWatcher:
    """Relays a ``Watcher`` living on the node's loop to the loop that iterates this one."""

    def __init__(self, store: NodeStore, loop: asyncio.AbstractEventLoop, key: bytes | None,
                 prefix: bytes | None, from_offset: int | None, *, from_index: int = 0) -> None:
        self._store = store
        self._loop = loop
        self._args = (key, prefix, from_offset, from_index)
        self._queue: asyncio.Queue[WatchItem | None] = asyncio.Queue(RELAY_QUEUE)
        self._relay: Any = None  # the relay's concurrent future, on the node's loop
        self._closed = False

    async def start(self) -> None:
        """Open the watch on the node's loop; raises ``BelowLogStart`` (410) from there."""
        here = asyncio.get_running_loop()
        opened: asyncio.Future[None] = here.create_future()
        self._relay = asyncio.run_coroutine_threadsafe(self._run(here, opened), self._loop)
        await opened

    async def _run(self, here: asyncio.AbstractEventLoop, opened: asyncio.Future[None]) -> None:
        key, prefix, from_offset, from_index = self._args
        hub = self._store.watch_hub()
        watcher: Watcher | None = None
        try:
            if hub is None:
                raise WatchHubClosed("the observer stopped serving watches: watch again")
            watcher = hub.watch(key=key, prefix=prefix, from_offset=from_offset,
                                from_index=from_index)
            await watcher.start()
        except BaseException as exc:
            if watcher is not None:
                await watcher.aclose()
            here.call_soon_threadsafe(_settle, opened, exc)
            return
        here.call_soon_threadsafe(_settle, opened, None)
        try:
            async for item in watcher:
                await asyncio.wrap_future(
                    asyncio.run_coroutine_threadsafe(self._queue.put(item), here))
        except (RuntimeError, asyncio.CancelledError):
            pass  # the serving loop closed, or this relay was cancelled
        finally:
            await watcher.aclose()
            with contextlib.suppress(RuntimeError):
                here.call_soon_threadsafe(self._queue.put_nowait, None)

    def __aiter__(self) -> AsyncIterator[WatchItem]:
        return self

    async def __anext__(self) -> WatchItem:
        if self._closed:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is None:
            self._closed = True
            raise StopAsyncIteration
        if isinstance(item, Cancelled):
            self._closed = True
        return item

    async def aclose(self) -> None:
        self._closed = True
        relay = self._relay
        if relay is not None and not relay.done():
            self._loop.call_soon_threadsafe(relay.cancel)
        while not self._queue.empty():  # unblock a relay waiting to put
            self._queue.get_nowait()


def _settle(future: asyncio.Future[None], exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)

