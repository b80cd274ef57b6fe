"""Appends into the leader's own core, grouped, with callbacks and no task per append.

The embedded HTTP API hands every append here while its node leads (``NodeBackend``). The
grouping is the client's ``AppendCoalescer`` rule, Nagle's idea without the timer: an append
goes out at once while fewer than ``max_in_flight`` batches await their commit; appends that
arrive meanwhile wait, and the next hand-over takes everything waiting as **one** batch. So a
lone client pays nothing and many clients share batches in proportion to the load. Unlike the
coalescer, nothing here is a coroutine: the core's answer (``RaftNode.submit_local_callback``)
settles each append's callback inside the node's handling of that answer, so a lone append's
commit reaches its HTTP response with no loop turn in between (on a 2-core machine each turn
costs the single-client path several per cent).

Invariants (the coalescer's):

* each append's records stay contiguous and in order inside a shared batch, and a batch is
  appended atomically, so every append is all-or-nothing and gets consecutive offsets;
* every append sharing a batch gets that batch's outcome: its own slice of the offsets, or the
  same error (a commit timeout leaves all of them equally unknown);
* when the core refuses a shared batch for its content (too large, invalid), nothing was
  appended, so each of its appends is handed over again on its own and only a faulty one fails;
* leadership is checked right before each hand-over (no loop turn in between): a group found on
  a node that no longer leads is forwarded (``forward``) instead; nothing was appended here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from kraft_spark.client.coalesce import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_RECORDS,
    BatchLimits,
    record_bytes,
)
from kraft_spark.client.errors import (
    ClientError,
    CommitTimeoutError,
    InvalidRecordError,
    NoLeaderError,
    RecordTooLargeError,
)
from kraft_spark.client.types import AppendResult
from kraft_spark.net.node_tokens import LocalNode, NodeStoppedError
from kraft_spark.raft.messages import ErrorCode, ProduceRequest, ProduceResponse, Response
from kraft_spark.raft.records import Record

# Told an append's outcome: (result, None) or (None, error). Called exactly once.
Settle = Callable[[AppendResult | None, BaseException | None], None]
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


class _Append:
    __slots__ = ("records", "settle", "size", "timeout_s")

    def __init__(self, records: tuple[Record, ...], timeout_s: float, settle: Settle) -> None:
        self.records = records
        self.timeout_s = timeout_s
        self.settle = settle
        self.size = sum(record_bytes(r) for r in records)


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
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._node = node
        self._forward = forward
        self._max_in_flight = max_in_flight
        self._limits = BatchLimits(max_batch_bytes, max_batch_records)
        self._waiting: list[_Append] = []
        self._in_flight = 0
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
        self._waiting.append(_Append(records, timeout_s, settle))
        if self._in_flight >= self._max_in_flight:
            return  # the next batch to settle takes it along
        if self._turn_scheduled:
            return  # handed over at the end of this loop turn, with the others of the turn
        # Others may arrive in this loop turn: they share the batch handed over at its end.
        self._turn_scheduled = True
        asyncio.get_running_loop().call_soon(self._on_turn)
        if self._in_flight == 0 and len(self._waiting) == 1:
            # A lone append goes at once. The turn stays scheduled even so: with one voter
            # (or a reply before the next arrival) its commit may settle before this returns,
            # and appends later in this turn must still share one batch, not go one by one.
            self._hand_over_waiting()

    def append(self, records: tuple[Record, ...], timeout_s: float) -> asyncio.Future[AppendResult]:
        """``submit`` with a future for coroutines."""
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()

        def settle(result: AppendResult | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

        self.submit(records, timeout_s, settle)
        return future

    def _on_turn(self) -> None:
        self._turn_scheduled = False
        self._hand_over_waiting()

    def _take(self) -> list[_Append]:
        """The longest prefix of the waiting appends that fits one batch (at least one)."""
        taken = self._limits.prefix(self._waiting)
        group, self._waiting = self._waiting[:taken], self._waiting[taken:]
        return group

    def _hand_over_waiting(self) -> None:
        while self._waiting and self._in_flight < self._max_in_flight and not self._closed:
            self._hand_over(self._take())

    def _hand_over(self, group: list[_Append]) -> None:
        records = group[0].records if len(group) == 1 else tuple(
            r for item in group for r in item.records
        )
        timeout_s = max(item.timeout_s for item in group)
        node = self._node
        if not node.is_leader:
            self._in_flight += 1
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
            self._in_flight -= 1
            if error is None:
                assert response is not None
                try:
                    self._finish(group, produce_result(response), None)
                except ClientError as exc:
                    self._finish(group, None, exc)
            else:
                self._finish(group, None, _unconfirmed(error))
            if self._waiting and not self._turn_scheduled:
                # Not from here: this runs inside the node's handling of the core's answer.
                self._turn_scheduled = True
                asyncio.get_running_loop().call_soon(self._on_turn)

        request = ProduceRequest(records, timeout_ms=max(1, int(timeout_s * 1000)))
        try:
            node.submit_local_callback(request, answered)
        except NodeStoppedError as exc:
            # Nothing was handed over: nothing appended.
            for item in group:
                item.settle(None, NoLeaderError(f"this node is stopping ({exc})"))
            return
        self._in_flight += 1
        self.batches_sent += 1
        self.appends_sent += len(group)
        guard = asyncio.get_running_loop().call_later(
            timeout_s + LOCAL_WAIT_MARGIN_S, answered, None, TimeoutError()
        )

    async def _forwarded(
        self, group: list[_Append], records: tuple[Record, ...], timeout_s: float
    ) -> None:
        try:
            result = await self._forward(records, timeout_s)
        except asyncio.CancelledError:
            self._in_flight -= 1
            for item in group:
                item.settle(None, ClientError(
                    "the node's HTTP API shut down while the append was forwarded; it may "
                    "still commit"
                ))
            raise
        except Exception as exc:
            self._in_flight -= 1
            self._finish(group, None, exc)
        else:
            self._in_flight -= 1
            self._finish(group, result, None)
        self._hand_over_waiting()

    def _finish(
        self, group: list[_Append], result: AppendResult | None, error: BaseException | None
    ) -> None:
        if error is not None:
            if len(group) > 1 and isinstance(error, RecordTooLargeError | InvalidRecordError):
                # Refused for its content: nothing was appended. Each again, on its own, ahead
                # of anything that arrived since (order of arrival is kept).
                self._waiting[:0] = [_Alone(item) for item in group]
                return
            for item in group:
                item.settle(None, error)
            return
        assert result is not None
        offset = result.base_offset
        for item in group:
            last = offset + len(item.records) - 1
            item.settle(AppendResult(offset, last, result.epoch), None)
            offset = last + 1

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Refuse new appends; fail the waiting ones; stop forwarding. Appends already in the
        core are settled by the node (its answer, or ``NodeStoppedError`` when it stops)."""
        self._closed = True
        waiting, self._waiting = self._waiting, []
        for item in waiting:
            item.settle(None, ClientError("the node's HTTP API shut down before the append was "
                                          "sent"))
        tasks = list(self._forwarding)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


class _Alone(_Append):
    """An append of a refused shared batch, handed over on its own: ``_take`` never groups it
    (its size counts as a whole batch)."""

    __slots__ = ()

    def __init__(self, item: _Append) -> None:
        self.records = item.records
        self.timeout_s = item.timeout_s
        self.settle = item.settle
        self.size = 1 << 62


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
