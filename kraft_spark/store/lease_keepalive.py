"""The leader's lease desk: keep-alives and TimeToLive answered from its countdowns
(``kraft_spark.store.lease_clock``), with no log write (etcd's ``LeaseRenew``).

A request reaches the leader: from this process's own HTTP or etcd API (``NodeStore``), or
from another node's over the wire (LeaseCountdown, ``protocol.wire_leases``; a follower
forwards what its callers ask, as it forwards their appends). Before it answers, the leader
proves it still leads, with a read index asked of its own core *after* the request arrived
(``raft.read_index``; shared by the requests that arrive while one is in flight), and waits
until its state applied that offset, as etcd's Renew waits for the leader to be current: a
deposed leader cannot confirm, so it never acknowledges a keep-alive. Then the countdown
restarts; a lease whose last checkpoint set a remaining TTL first has a checkpoint clearing it
committed (``LeaseClock.countdown`` says when).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final, Protocol

from kraft_spark.net.local_requests import LocalSubmitter, NodeStoppedError, local_answer
from kraft_spark.net.state_keeper import StateKeeper
from kraft_spark.protocol import ApiKey, RequestHeader
from kraft_spark.protocol.wire_leases import (
    Body,
    Responder,
    SideHandler,
    not_here,
    request_from_wire,
    respond,
)
from kraft_spark.raft.messages import (
    ErrorCode,
    ProduceRequest,
    ReadIndexRequest,
    ReadIndexResponse,
)
from kraft_spark.store.lease_clock import (
    CountdownAnswer,
    CountdownRequest,
    CountdownStatus,
    LeaseClock,
    checkpoint_record,
)
from kraft_spark.store.read_batch import ReadIndexBatcher

log = logging.getLogger(__name__)

READ_INDEX_TIMEOUT_MS: Final = 5000
APPLY_POLL_S: Final = 0.002


class DeskNode(LocalSubmitter, Protocol):
    """What the desk needs of a ``RaftNode``."""

    side_requests: dict[int, SideHandler]
    lease_desk: Any

    @property
    def keeper(self) -> StateKeeper: ...


class _NotLeader(Exception):
    def __init__(self, leader_id: int) -> None:
        super().__init__(f"not the leader (leader {leader_id})")
        self.leader_id = leader_id


def _not_confirmed(why: str) -> CountdownAnswer:
    return CountdownAnswer(CountdownStatus.TIMED_OUT,
                           message=f"the leader could not confirm its leadership: {why}")


class LeaseDesk:
    def __init__(self, node: DeskNode, clock: LeaseClock) -> None:
        self._node = node
        self.clock = clock
        self._batcher: ReadIndexBatcher[tuple[int, int]] = ReadIndexBatcher(self._confirm)
        self._tasks: set[asyncio.Task[None]] = set()
        self.renewals = 0  # keep-alives acknowledged (tests, bench)
        self.clears = 0  # of which first cleared a checkpoint

    def attach(self) -> LeaseDesk:
        self._node.side_requests[ApiKey.LEASE_COUNTDOWN] = self.serve_wire
        self._node.lease_desk = self
        return self

    def detach(self) -> None:
        self._node.side_requests[ApiKey.LEASE_COUNTDOWN] = not_here
        if self._node.lease_desk is self:
            self._node.lease_desk = None
        for task in self._tasks:
            task.cancel()

    async def _confirm(self) -> tuple[int, int]:
        """(read offset, leader epoch), confirmed by a majority after the call began."""
        response = await local_answer(self._node, ReadIndexRequest(READ_INDEX_TIMEOUT_MS))
        assert isinstance(response, ReadIndexResponse)
        if response.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise _NotLeader(response.leader_id)
        if response.error != ErrorCode.NONE:
            raise TimeoutError(response.error.name)
        return response.read_offset, response.leader_epoch

    async def _applied(self, offset: int, deadline: float) -> None:
        keeper = self._node.keeper
        while keeper.state.applied_offset < offset:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the state did not apply offset {offset} in time")
            await asyncio.sleep(APPLY_POLL_S)

    async def answer(self, request: CountdownRequest) -> CountdownAnswer:
        """Renew or read one lease's countdown, as the confirmed leader."""
        timeout_s = request.timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        try:
            offset, epoch = await self._batcher.read_index(timeout_s)
            await self._applied(offset, deadline)
        except _NotLeader as exc:
            return CountdownAnswer(CountdownStatus.NOT_LEADER, exc.leader_id, message=str(exc))
        except NodeStoppedError as exc:
            return CountdownAnswer(CountdownStatus.NOT_LEADER, message=str(exc))
        except TimeoutError as exc:
            return _not_confirmed(str(exc) or "timed out")
        answer, clear = self.clock.countdown(epoch, self._node.keeper.state.leases, request)
        if clear and answer.status is CountdownStatus.OK:
            failed = await self._clear(request, max(0.001, deadline - time.monotonic()))
            if failed is not None:
                return failed
            self.clears += 1
        if request.renew and answer.status is CountdownStatus.OK:
            self.renewals += 1
        return answer

    async def _clear(self, request: CountdownRequest, timeout_s: float
                     ) -> CountdownAnswer | None:
        """Commit a checkpoint clearing the lease's remaining TTL: None once it did, else
        the answer to give (the keep-alive is not acknowledged)."""
        record = checkpoint_record({request.lease_id: 0}, int(time.time() * 1000))
        try:
            response = await asyncio.wait_for(local_answer(self._node, ProduceRequest(
                (record,), timeout_ms=max(1, int(timeout_s * 1000)))), timeout_s + 1)
        except (NodeStoppedError, TimeoutError) as exc:
            return _not_confirmed(f"clearing its checkpoint: {exc or 'timed out'}")
        error = getattr(response, "error", ErrorCode.NONE)
        if error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            return CountdownAnswer(CountdownStatus.NOT_LEADER,
                                   getattr(response, "leader_id", -1), message="leadership moved")
        if error != ErrorCode.NONE:
            return _not_confirmed(f"clearing its checkpoint: {error.name}")
        return None

    def serve_wire(self, conn: Responder, header: RequestHeader, body: Body,
                   trusted: bool) -> None:
        """A LeaseCountdown from another node (``net.node``'s side requests)."""
        if not trusted:
            respond(conn, header, CountdownAnswer(CountdownStatus.NOT_OWNER, message=(
                "LeaseCountdown names the caller's credential: only the quorum's own identity "
                "or a super user may send it")))
            return
        try:
            request = request_from_wire(body)
        except ValueError as exc:
            respond(conn, header, CountdownAnswer(CountdownStatus.INVALID, message=str(exc)))
            return

        async def serve() -> None:
            with contextlib.suppress(asyncio.CancelledError):
                respond(conn, header, await self.answer(request))

        task = asyncio.get_running_loop().create_task(serve())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
