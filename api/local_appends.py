"""How the embedded HTTP API hands a batch of appends over: into the leader's own core, with a
callback and no task (``LeaderHandOver``), grouped by the one coalescer
(``kraft_spark.client.coalesce.AppendCoalescer``, which ``NodeBackend`` runs with it).

The core's answer (``RaftNode.submit_local``) settles the batch inside the node's handling of
that answer, so a lone append's commit reaches its HTTP response with no loop turn in between
(on a 2-core machine each turn costs the single-client path several per cent).

One invariant of its own: leadership is checked right before each hand-over (no loop turn in
between); a batch found on a node that no longer leads is forwarded (``forward``) instead, and
nothing was appended here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from kraft_spark.client.append_groups import Settle
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


class LeaderHandOver:
    """A ``HandOver`` into ``node``'s core while it leads, else to ``forward``."""

    def __init__(self, node: LocalNode, forward: Forward) -> None:
        self._node = node
        self._forward = forward
        # For tests and diagnostics.
        self.batches_sent = 0  # handed to the local core (shared or not)
        self.forwarded_batches = 0

    def __call__(self, records: tuple[Record, ...], timeout_s: float,
                 done: Settle) -> Awaitable[AppendResult] | None:
        node = self._node
        if not node.is_leader:
            self.forwarded_batches += 1
            return self._forward(records, timeout_s)
        guard: asyncio.TimerHandle | None = None

        def answered(response: Response | None, error: BaseException | None) -> None:
            if guard is not None:
                guard.cancel()
            if error is not None:
                done(None, _unconfirmed(error))
                return
            assert response is not None
            try:
                result = produce_result(response)
            except ClientError as exc:
                done(None, exc)
            else:
                done(result, None)

        request = ProduceRequest(records, timeout_ms=max(1, int(timeout_s * 1000)))
        try:
            node.submit_local(request, answered)
        except NodeStoppedError as exc:
            # Nothing was handed over: nothing appended.
            raise NoLeaderError(f"this node is stopping ({exc})") from exc
        self.batches_sent += 1
        # Past the append's own timeout (which the core enforces), a last guard against a
        # stuck wait; ``done`` ignores whichever of the two comes second.
        guard = asyncio.get_running_loop().call_later(
            timeout_s + LOCAL_WAIT_MARGIN_S, answered, None, TimeoutError())
        return None


def _unconfirmed(error: BaseException) -> BaseException:
    """A hand-over whose answer never came (node stopped, guard expired): its outcome is
    unknown, never retried here."""
    if isinstance(error, NodeStoppedError | TimeoutError):
        return CommitTimeoutError(
            f"the append was not confirmed ({error or 'no answer in time'}); it may still "
            "commit: check with a read before appending it again"
        )
    return error


__all__ = ["LOCAL_WAIT_MARGIN_S", "LeaderHandOver", "Settle", "produce_result"]
