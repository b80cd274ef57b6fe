"""One read-index request per round trip, however many linearizable reads arrive.

A read may use only a read index asked for *after* it arrived (else a write acknowledged
between the request and the read's arrival could be missed). So reads that arrive while a
request is in flight wait for the next one, which goes out as soon as the one in flight is
answered, and all of them share its answer: etcd's batching of ReadIndex, here in front of
``NodeStore``'s request (to the local core on the leader, over the wire elsewhere).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ReadIndexBatcher(Generic[T]):
    """Shares each answer of ``fetch`` (the read index, or anything asked the same way)."""

    def __init__(self, fetch: Callable[[], Awaitable[T]]) -> None:
        self._fetch = fetch
        self._in_flight = False
        self._next: asyncio.Future[T] | None = None  # the batch waiting for the next request
        self.requests = 0  # read-index requests sent (tests, metrics)

    async def read_index(self, timeout_s: float) -> T:
        loop = asyncio.get_running_loop()
        if not self._in_flight:
            batch: asyncio.Future[T] = loop.create_future()
            self._send(batch)
        else:
            if self._next is None:
                self._next = loop.create_future()
            batch = self._next
        return await asyncio.wait_for(asyncio.shield(batch), timeout_s)

    def _send(self, batch: asyncio.Future[T]) -> None:
        self._in_flight = True
        self.requests += 1
        task = asyncio.ensure_future(self._fetch())
        task.add_done_callback(lambda done: self._answered(done, batch))

    def _answered(self, done: asyncio.Future[T], batch: asyncio.Future[T]) -> None:
        self._in_flight = False
        if not batch.done():
            if done.cancelled():
                batch.cancel()
            elif done.exception() is not None:
                batch.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                batch.set_result(done.result())
        elif not done.cancelled():
            done.exception()  # retrieved: nobody waits for it any more
        waiting, self._next = self._next, None
        if waiting is not None:
            self._send(waiting)
