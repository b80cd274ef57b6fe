"""Coalescing concurrent appends into shared batches, with no added delay.

A server front end (the HTTP sidecar) turns every request into one ``append``. Sent one by one,
256 concurrent single-record appends cost the leader 256 Produce requests, 256 batches to
validate, append and replicate, and its followers 256 batches to store. The coalescer sends an
append at once while fewer than ``max_in_flight`` sends are under way; appends that arrive
while all are busy wait, and the next free sender takes everything waiting as **one** batch.
So one client pays nothing (its append goes out immediately) and many clients share batches
in proportion to the load, which is Nagle's idea without the timer.

Invariants:

* each append's records stay contiguous and in order inside the shared batch, and a batch is
  appended atomically, so every append is still all-or-nothing and gets consecutive offsets;
* every append sharing a batch gets that batch's outcome: its own slice of the offsets, or the
  same error (a commit timeout leaves all of them equally unknown; retrying under an
  idempotency key above this layer stays safe because the batch was one producer sequence);
* when the leader refuses a shared batch outright (too large, invalid record), nothing was
  appended, so each of its appends is sent again on its own and only the faulty one fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kraft_spark.client.errors import ClientError, InvalidRecordError, RecordTooLargeError
from kraft_spark.client.types import AppendResult, payload_bytes
from kraft_spark.raft.records import Record

SendBatch = Callable[[tuple[Record, ...], float], Awaitable[AppendResult]]

DEFAULT_MAX_IN_FLIGHT = 4
# Well under the quorum's default maximum batch size (1 MiB), so a shared batch is never
# refused for its size when each of its appends alone would have been accepted.
DEFAULT_MAX_BATCH_BYTES = 256 * 1024
DEFAULT_MAX_BATCH_RECORDS = 5000


def record_bytes(record: Record) -> int:
    """The record's payload plus ~16 bytes of per-record framing in a batch."""
    return payload_bytes(record.key, record.value, record.headers) + 16


class Pending(Protocol):
    """An append waiting to share a batch: its records and their size (``record_bytes``)."""

    records: tuple[Record, ...]
    size: int


@dataclass(frozen=True)
class BatchLimits:
    """How large a shared batch may grow, in payload bytes and in records."""

    max_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_records: int = DEFAULT_MAX_BATCH_RECORDS

    def prefix(self, waiting: Sequence[Pending]) -> int:
        """How many of ``waiting``, from the first, fit one batch: at least one (a lone append
        over the limits still goes alone; the leader judges it), never splitting one."""
        taken = size = count = 0
        for item in waiting:
            if taken and (size + item.size > self.max_bytes
                          or count + len(item.records) > self.max_records):
                break
            taken += 1
            size += item.size
            count += len(item.records)
        return taken


@dataclass
class _Waiting:
    records: tuple[Record, ...]
    timeout_s: float
    size: int
    result: asyncio.Future[AppendResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class AppendCoalescer:
    def __init__(self, send: SendBatch, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._send = send
        self._max_in_flight = max_in_flight
        self._limits = BatchLimits(max_batch_bytes, max_batch_records)
        self._waiting: list[_Waiting] = []
        self._senders = 0
        self._tasks: set[asyncio.Future[None]] = set()
        self._closed = False
        self.batches_sent = 0  # shared or not; for tests and metrics
        self.appends_sent = 0

    async def append(self, records: tuple[Record, ...], timeout_s: float) -> AppendResult:
        if self._closed:
            raise ClientError("the client is closed")
        item = _Waiting(records, timeout_s, sum(record_bytes(r) for r in records))
        self._waiting.append(item)
        if self._senders < self._max_in_flight:
            self._senders += 1
            task = asyncio.ensure_future(self._sender())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await item.result

    async def close(self) -> None:
        """Stop sending; appends not yet settled fail with ``ClientError``."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for item in self._waiting:
            _settle(item, ClientError("the client was closed before the append was sent"))
        self._waiting.clear()

    def _take(self) -> list[_Waiting]:
        """The longest prefix of the waiting appends that fits one batch (at least one)."""
        # An append whose caller gave up before it was sent is dropped, not sent.
        self._waiting = [item for item in self._waiting if not item.result.done()]
        taken = self._limits.prefix(self._waiting)
        group, self._waiting = self._waiting[:taken], self._waiting[taken:]
        return group

    async def _sender(self) -> None:
        try:
            while self._waiting:
                group = self._take()
                if group:
                    await self._send_group(group)
        finally:
            self._senders -= 1

    async def _send_group(self, group: list[_Waiting]) -> None:
        records = tuple(r for item in group for r in item.records)
        self.batches_sent += 1
        self.appends_sent += len(group)
        try:
            result = await self._send(records, max(item.timeout_s for item in group))
        except asyncio.CancelledError:
            for item in group:
                _settle(item, ClientError("the client was closed while the append was sent; it "
                                          "may still commit"))
            raise
        except (RecordTooLargeError, InvalidRecordError) as exc:
            if len(group) == 1:
                _settle(group[0], exc)
                return
            for item in group:  # refused outright: nothing was appended; find the culprit
                await self._send_group([item])
            return
        except Exception as exc:  # every append of the batch shares its outcome
            for item in group:
                _settle(item, exc)
            return
        offset = result.base_offset
        for item in group:
            last = offset + len(item.records) - 1
            if not item.result.done():
                item.result.set_result(AppendResult(offset, last, result.epoch))
            offset = last + 1


def _settle(item: _Waiting, exc: BaseException) -> None:
    if not item.result.done():
        item.result.set_exception(exc)
