"""Coalescing concurrent appends into shared batches, with no added delay.

A server front end (the HTTP sidecar) turns every request into one ``append``. Sent one by one,
256 concurrent single-record appends cost the leader 256 Produce requests, 256 batches to
validate, append and replicate, and its followers 256 batches to store. The coalescer sends
appends in shared batches by ``append_groups``' rule (the one the leader's own HTTP API uses
too): up to ``max_in_flight`` sender tasks each take the next group when they run, so appends
made in the same loop turn as the first go out together with it, and appends made while every
sender is busy go together in the next batch.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

from kraft_spark.aio import settle_future
from kraft_spark.client.append_groups import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_RECORDS,
    DEFAULT_MAX_IN_FLIGHT,
    AppendGroups,
    BatchLimits,
    PendingAppend,
    batch_of,
    batch_timeout_s,
)
from kraft_spark.client.errors import ClientError
from kraft_spark.client.types import AppendResult
from kraft_spark.raft.records import Record

SendBatch = Callable[[tuple[Record, ...], float], Awaitable[AppendResult]]


class _Awaited(PendingAppend):
    """An append whose caller awaits a future (gone once the caller gave up)."""

    __slots__ = ("result",)

    def __init__(self, records: tuple[Record, ...], timeout_s: float) -> None:
        self.result: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        super().__init__(records, timeout_s, functools.partial(settle_future, self.result))

    def gone(self) -> bool:
        return self.result.done()


class AppendCoalescer:
    def __init__(self, send: SendBatch, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS) -> None:
        self._send = send
        self._groups = AppendGroups(max_in_flight, BatchLimits(max_batch_bytes,
                                                               max_batch_records))
        self._senders: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def batches_sent(self) -> int:
        """Batches sent, shared or not (for tests and metrics)."""
        return self._groups.batches_sent

    @property
    def appends_sent(self) -> int:
        return self._groups.appends_sent

    async def append(self, records: tuple[Record, ...], timeout_s: float) -> AppendResult:
        if self._closed:
            raise ClientError("the client is closed")
        item = _Awaited(records, timeout_s)
        self._groups.add(item)
        self._send_waiting()
        return await item.result

    async def close(self) -> None:
        """Stop sending; appends not yet settled fail with ``ClientError``."""
        self._closed = True
        senders = list(self._senders)
        for task in senders:
            task.cancel()
        if senders:
            await asyncio.gather(*senders, return_exceptions=True)
        self._groups.fail_waiting(ClientError("the client was closed before the append was "
                                              "sent"))

    def _send_waiting(self) -> None:
        if len(self._senders) < self._groups.max_in_flight:
            task = asyncio.get_running_loop().create_task(self._sender())
            self._senders.add(task)
            task.add_done_callback(self._senders.discard)

    async def _sender(self) -> None:
        """Send groups until nothing waits (a group is taken when this runs, not when it was
        created: the appends of the loop turn that created it go together)."""
        while not self._closed and (group := self._groups.next_group()) is not None:
            try:
                result = await self._send(batch_of(group), batch_timeout_s(group))
            except asyncio.CancelledError:
                self._groups.done(group, None, ClientError(
                    "the client was closed while the append was sent; it may still commit"))
                raise
            except Exception as exc:  # every append of the batch shares its outcome
                self._groups.done(group, None, exc)
            else:
                self._groups.done(group, result, None)
