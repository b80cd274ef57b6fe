"""Appends into the leader's own core, grouped, with callbacks and no task per append.

The embedded HTTP API hands every append here while its node leads (``NodeBackend``). The
grouping is ``kraft_spark.client.append_groups``' rule, the client coalescer's too (its
invariants hold here): an append goes out at once while fewer than ``max_in_flight`` batches
await their commit; appends that arrive meanwhile wait, and the next hand-over takes everything
waiting as **one** batch. Unlike the coalescer, nothing here is a coroutine: the core's answer
(``RaftNode.submit_local``) settles each append's callback inside the node's handling
of that answer, so a lone append's commit reaches its HTTP response with no loop turn in
between (on a 2-core machine each turn costs the single-client path several per cent).

One more invariant of its own: leadership is checked right before each hand-over (no loop turn
in between); a group found on a node that no longer leads is forwarded (``forward``) instead,
and nothing was appended here.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Final

from kraft_spark.aio import settle_future
from kraft_spark.client.append_groups import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_RECORDS,
    AppendGroups,
    BatchLimits,
    PendingAppend,
    Settle,
    batch_of,
    batch_timeout_s,
)
from kraft_spark.client.errors import (
    ClientError,
    CommitTimeoutError,
    InvalidRecordError,
    NoLeaderError,
    RecordTooLargeError,
)
from kraft_spark.client.types import AppendResult
from kraft_spark.net.local_requests import LocalNode, NodeStoppedError
from kraft_spark.raft.messages import ErrorCode, ProduceRequest, ProduceResponse, Response
from kraft_spark.raft.records import Record

Forward = Callable[[tuple[Record, ...], float], Awaitable[AppendResult]]

# Past the append's own timeout (which the core enforces), a last guard against a stuck wait.
LOCAL_WAIT_MARGIN_S: Final = 2.0


def produce_result(response: Response) -> AppendResult:
    """The outcome of a Produce handed to the local core while it led, in the client's terms.

    Only refusals for the batch's content mean nothing was appended; every other failure
    leaves the outcome unknown (``CommitTimeoutError``: never retried here)."""
    if not isinstance(response, ProduceResponse):
        raise ClientError(f"append failed: unexpected answer {type(response).__name__}")
    error = response.error
    if error == ErrorCode.NONE:
        return AppendResult(response.base_offset, response.last_offset, response.epoch)
    message = response.message or error.name
    if error == ErrorCode.MESSAGE_TOO_LARGE:
        raise RecordTooLargeError(f"the quorum refused the batch: {message}")
    if error in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE):
        raise InvalidRecordError(f"the quorum refused the batch: {message}")
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT):
        raise CommitTimeoutError(
            f"the append was not confirmed ({error.name}: {message}); it may still commit: "
            "check with a read before appending it again"
        )
    raise ClientError(f"append failed: {error.name} ({int(error)}) ({message})")


class LocalAppends:
    def __init__(
        self,
        node: LocalNode,
        forward: Forward,
        *,
        max_in_flight: int,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
    ) -> None:
        self._node = node
        self._forward = forward
        self._groups = AppendGroups(max_in_flight, BatchLimits(max_batch_bytes,
                                                               max_batch_records))
        self._turn_scheduled = False
        self._forwarding: set[asyncio.Task[None]] = set()
        self._closed = False
        # For tests and diagnostics.
        self.batches_sent = 0  # handed to the local core (shared or not)
        self.appends_sent = 0
        self.forwarded_batches = 0

    # ------------------------------------------------------------------ appending

    def submit(self, records: tuple[Record, ...], timeout_s: float, settle: Settle) -> None:
        """Append ``records`` (non-empty); ``settle`` is called once with the outcome, maybe
        before this returns (a refusal), usually from the core's answer."""
        if self._closed:
            settle(None, ClientError("the node's HTTP API is shutting down"))
            return
        groups = self._groups
        groups.add(PendingAppend(records, timeout_s, settle))
        if not groups.slot_free:
            return  # the next batch to settle takes it along
        if self._turn_scheduled:
            return  # handed over at the end of this loop turn, with the others of the turn
        # Others may arrive in this loop turn: they share the batch handed over at its end.
        self._turn_scheduled = True
        asyncio.get_running_loop().call_soon(self._on_turn)
        if groups.in_flight == 0 and len(groups.waiting) == 1:
            # A lone append goes at once. The turn stays scheduled even so: with one voter
            # (or a reply before the next arrival) its commit may settle before this returns,
            # and appends later in this turn must still share one batch, not go one by one.
            self._hand_over_waiting()

    def append(self, records: tuple[Record, ...], timeout_s: float) -> asyncio.Future[AppendResult]:
        """``submit`` with a future for coroutines."""
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self.submit(records, timeout_s, functools.partial(settle_future, future))
        return future

    def _on_turn(self) -> None:
        self._turn_scheduled = False
        self._hand_over_waiting()

    def _hand_over_waiting(self) -> None:
        while not self._closed and (group := self._groups.next_group()) is not None:
            self._hand_over(group)

    def _hand_over(self, group: list[PendingAppend]) -> None:
        """Hand ``group`` (holding a slot of ``_groups``) to the core, or forward it."""
        records = batch_of(group)
        timeout_s = batch_timeout_s(group)
        node = self._node
        if not node.is_leader:
            self.forwarded_batches += 1
            task = asyncio.get_running_loop().create_task(self._forwarded(group, records,
                                                                          timeout_s))
            self._forwarding.add(task)
            task.add_done_callback(self._forwarding.discard)
            return
        guard: asyncio.TimerHandle | None = None
        settled = False

        def answered(response: Response | None, error: BaseException | None) -> None:
            nonlocal settled
            if settled:
                return  # the guard fired first
            settled = True
            if guard is not None:
                guard.cancel()
            if error is None:
                assert response is not None
                try:
                    self._groups.done(group, produce_result(response), None)
                except ClientError as exc:
                    self._groups.done(group, None, exc)
            else:
                self._groups.done(group, None, _unconfirmed(error))
            if self._groups.waiting and not self._turn_scheduled:
                # Not from here: this runs inside the node's handling of the core's answer.
                self._turn_scheduled = True
                asyncio.get_running_loop().call_soon(self._on_turn)

        request = ProduceRequest(records, timeout_ms=max(1, int(timeout_s * 1000)))
        try:
            node.submit_local(request, answered)
        except NodeStoppedError as exc:
            # Nothing was handed over: nothing appended.
            self._groups.done(group, None, NoLeaderError(f"this node is stopping ({exc})"))
            return
        self.batches_sent += 1
        self.appends_sent += len(group)
        guard = asyncio.get_running_loop().call_later(
            timeout_s + LOCAL_WAIT_MARGIN_S, answered, None, TimeoutError()
        )

    async def _forwarded(
        self, group: list[PendingAppend], records: tuple[Record, ...], timeout_s: float
    ) -> None:
        try:
            result = await self._forward(records, timeout_s)
        except asyncio.CancelledError:
            self._groups.done(group, None, ClientError(
                "the node's HTTP API shut down while the append was forwarded; it may still "
                "commit"))
            raise
        except Exception as exc:
            self._groups.done(group, None, exc)
        else:
            self._groups.done(group, result, None)
        self._hand_over_waiting()

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Refuse new appends; fail the waiting ones; stop forwarding. Appends already in the
        core are settled by the node (its answer, or ``NodeStoppedError`` when it stops)."""
        self._closed = True
        self._groups.fail_waiting(ClientError("the node's HTTP API shut down before the "
                                              "append was sent"))
        tasks = list(self._forwarding)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _unconfirmed(error: BaseException) -> BaseException:
    """A hand-over whose answer never came (node stopped, guard expired): its outcome is
    unknown, never retried here."""
    if isinstance(error, NodeStoppedError | TimeoutError):
        return CommitTimeoutError(
            f"the append was not confirmed ({error or 'no answer in time'}); it may still "
            "commit: check with a read before appending it again"
        )
    return error


__all__ = ["LOCAL_WAIT_MARGIN_S", "LocalAppends", "Settle", "produce_result"]
