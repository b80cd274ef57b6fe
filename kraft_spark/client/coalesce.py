"""Coalescing concurrent appends into shared batches, with no added delay: the one coalescer of
the client (appends sent to a leader as Produce requests) and of the embedded HTTP API (appends
handed to the leader's own core, ``api/local_appends.py``).

Sent one by one, 256 concurrent single-record appends cost the leader 256 Produce requests, 256
batches to validate, append and replicate, and its followers 256 batches to store. The
coalescer groups them by ``append_groups``' rule: a lone append goes at once; appends arriving
in the same loop turn share the batch handed over at the turn's end; appends arriving while
``max_in_flight`` batches are under way wait, and the next free slot takes all of them as one.

How a batch is handed over is its user's (``HandOver``): either it settles the batch through
the ``done`` callback it is given, with no task and no loop turn (the leader's own core, whose
answer settles each append inside the node's handling of it: on a 2-core machine each loop turn
costs the single-client path several per cent), or it returns an awaitable of the outcome,
which the coalescer awaits in a task of its own (a network send, a forward to the leader) and
cancels on ``close``.
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
    Settle,
    batch_of,
    batch_timeout_s,
)
from kraft_spark.client.errors import ClientError
from kraft_spark.client.types import AppendResult
from kraft_spark.raft.records import Record

SendBatch = Callable[[tuple[Record, ...], float], Awaitable[AppendResult]]
# Hands a batch (records, timeout in seconds) over: settles it by calling ``done`` exactly once
# (maybe before returning) and returns None, or returns an awaitable of its outcome. Raising
# means nothing was handed over: every append of the batch fails with that error.
HandOver = Callable[[tuple[Record, ...], float, Settle], Awaitable[AppendResult] | None]


def sending(send: SendBatch) -> HandOver:
    """The hand-over of a coroutine sender (the client's Produce): awaited in a task."""
    return lambda records, timeout_s, _done: send(records, timeout_s)


class _Awaited(PendingAppend):
    """An append whose caller awaits a future (gone once the caller gave up)."""

    __slots__ = ("result",)

    def __init__(self, records: tuple[Record, ...], timeout_s: float) -> None:
        self.result: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        super().__init__(records, timeout_s, functools.partial(settle_future, self.result))

    def gone(self) -> bool:
        return self.result.done()


class AppendCoalescer:
    """``owner`` names who closes it in errors ("the client", "the node's HTTP API")."""

    def __init__(self, hand_over: HandOver, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
                 owner: str = "the client") -> None:
        self._hand = hand_over
        self._owner = owner
        self._groups = AppendGroups(max_in_flight, BatchLimits(max_batch_bytes,
                                                               max_batch_records))
        self._turn_scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def batches_sent(self) -> int:
        """Batches handed over, shared or not (for tests and metrics)."""
        return self._groups.batches_sent

    @property
    def appends_sent(self) -> int:
        return self._groups.appends_sent

    # ------------------------------------------------------------------ appending

    def submit(self, records: tuple[Record, ...], timeout_s: float, settle: Settle) -> None:
        """Append ``records`` (non-empty); ``settle`` is called once with the outcome, maybe
        before this returns."""
        if self._closed:
            settle(None, ClientError(f"{self._owner} is closed"))
            return
        self._add(PendingAppend(records, timeout_s, settle))

    def append(self, records: tuple[Record, ...], timeout_s: float) -> asyncio.Future[AppendResult]:
        """``submit`` with a future for coroutines (an append whose future is cancelled before
        it is handed over is not sent)."""
        if self._closed:
            raise ClientError(f"{self._owner} is closed")
        item = _Awaited(records, timeout_s)
        self._add(item)
        return item.result

    def _add(self, item: PendingAppend) -> None:
        groups = self._groups
        groups.add(item)
        if not groups.slot_free or self._turn_scheduled:
            return  # the next batch to settle, or this turn's end, takes it along
        # Others may arrive in this loop turn: they share the batch handed over at its end.
        self._turn_scheduled = True
        asyncio.get_running_loop().call_soon(self._on_turn)
        if groups.in_flight == 0 and len(groups.waiting) == 1:
            # A lone append goes at once. The turn stays scheduled even so: its batch may
            # settle before this returns, and appends later in this turn must still share
            # one batch, not go one by one.
            self._hand_over_waiting()

    def _on_turn(self) -> None:
        self._turn_scheduled = False
        self._hand_over_waiting()

    def _hand_over_waiting(self) -> None:
        while not self._closed and (group := self._groups.next_group()) is not None:
            self._hand_over(group)

    def _hand_over(self, group: list[PendingAppend]) -> None:
        """Hand ``group`` (holding a slot of ``_groups``) over; its outcome settles it once."""
        settled = False

        def done(result: AppendResult | None, error: BaseException | None) -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            self._groups.done(group, result, error)
            if self._groups.waiting and not self._turn_scheduled:
                # Not from here: a callback may run inside its caller's own handling (the
                # node's, of the core's answer).
                self._turn_scheduled = True
                asyncio.get_running_loop().call_soon(self._on_turn)

        try:
            pending = self._hand(batch_of(group), batch_timeout_s(group), done)
        except Exception as exc:  # nothing was handed over
            done(None, exc)
            return
        if pending is not None:
            task = asyncio.get_running_loop().create_task(self._awaited(pending, done))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _awaited(self, pending: Awaitable[AppendResult], done: Settle) -> None:
        try:
            result = await pending
        except asyncio.CancelledError:
            done(None, ClientError(f"{self._owner} was closed while the append was sent; it "
                                   "may still commit"))
            raise
        except Exception as exc:  # every append of the batch shares its outcome
            done(None, exc)
        else:
            done(result, None)
        self._hand_over_waiting()  # in our own task: no need to wait for the next turn

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Refuse new appends; fail the waiting ones (``ClientError``); cancel the batches
        being awaited (their outcome is unknown). Batches settled through ``done`` are settled
        by their hand-over."""
        self._closed = True
        self._groups.fail_waiting(ClientError(f"{self._owner} was closed before the append "
                                              "was sent"))
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
