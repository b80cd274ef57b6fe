"""Noticing a new leader while a request waits on the old one (gray failures).

A leader that is frozen (SIGSTOP, a long GC pause, a stalled VM) or whose answers are cut off
resets no connection: a request sent to it just waits for its timeout. Meanwhile the other
voters stop hearing from it, time out (``controller.quorum.fetch.timeout.ms``), elect a new
leader and learn of it through BeginQuorumEpoch. So while a request to the believed leader is
outstanding longer than a commit normally takes, the client asks the other nodes who leads (a
DescribeQuorum with a short timeout, which a follower answers with NOT_LEADER_OR_FOLLOWER and
the leader it knows). A leader named at a higher epoch than the one the request went to means
the request's target can no longer commit anything: the request is abandoned and the caller
retries on the new leader. Appends are retried on the same producer id and sequence, so an
append the old leader had taken is never applied twice.

Concurrent requests share the questions: one ticker per client looks at the waiting requests
every ``probe_after_s``, at most one round of questions is in flight per client, and a round
answered less than ``probe_after_s / 2`` ago is reused, so a slow moment under many
connections costs the followers a few DescribeQuorums, not one per waiting request.

Only a *known leader at a higher epoch* moves the client: a higher epoch with no leader (an
election in progress, or one partitioned voter that keeps bumping its epoch) does not prove
that the old leader has stopped committing.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

Endpoint = tuple[str, int]
# Asks one node who leads: (leader id, epoch) as it knows them, or None (no answer in time).
AskLeader = Callable[[Endpoint, float], Awaitable[tuple[int, int] | None]]

# A commit on a healthy quorum takes milliseconds (an fsync on each of two nodes); a request
# still unanswered after this long starts the probes.
DEFAULT_PROBE_AFTER_S = 0.25


class LeaderMovedError(Exception):
    """A request's target was replaced by ``leader_id`` at ``epoch``, reachable at
    ``endpoint``; the request was abandoned (its outcome is unknown)."""

    def __init__(self, leader_id: int, epoch: int, endpoint: Endpoint) -> None:
        super().__init__(f"node {leader_id} leads epoch {epoch} at {endpoint[0]}:{endpoint[1]}")
        self.leader_id = leader_id
        self.epoch = epoch
        self.endpoint = endpoint


class _Waiting:
    """One request waiting on its target."""

    __slots__ = ("epoch", "moved", "others", "since", "target", "task")

    def __init__(self, task: asyncio.Task[object], target: Endpoint, epoch: int,
                 others: tuple[Endpoint, ...], since: float) -> None:
        self.task = task
        self.target = target
        self.epoch = epoch
        self.others = others
        self.since = since
        self.moved: LeaderMovedError | None = None


class LeaderWatch:
    """``probe_after_s``: how long a request may wait before the others are asked (then again
    every ``probe_after_s``); each question waits at most ``probe_timeout_s``. One per client,
    used from its event loop only."""

    def __init__(self, ask: AskLeader, endpoint_of: Callable[[int], Endpoint | None], *,
                 probe_after_s: float = DEFAULT_PROBE_AFTER_S,
                 probe_timeout_s: float = DEFAULT_PROBE_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ask = ask
        self.endpoint_of = endpoint_of
        self.probe_after_s = probe_after_s
        self.probe_timeout_s = probe_timeout_s
        self._clock = clock
        self._round: asyncio.Future[list[tuple[int, int] | BaseException | None]] | None = None
        self._round_started = -math.inf
        self.rounds = 0  # rounds of questions asked (for tests and benchmarks)
        self._waiting: set[_Waiting] = set()
        self._ticker: asyncio.Task[None] | None = None

    async def await_unless_replaced(self, request: Awaitable[T], *, target: Endpoint,
                                    target_epoch: int, others: Sequence[Endpoint]) -> T:
        """The result of ``request`` sent to ``target`` (believed to lead ``target_epoch``, -1
        if unknown); raises :class:`LeaderMovedError` as soon as one of ``others`` names
        another leader at a higher epoch.

        The request is awaited in the caller's own task and only registered with the client's
        one ticker (every ``probe_after_s`` while requests are outstanding), so a prompt answer
        costs a dictionary entry. When a request has waited longer, the ticker asks the
        others; if they name a newer leader it cancels the caller's task, and the cancellation
        becomes the ``LeaderMovedError``. (An answer that arrived in that same instant is lost
        and the caller retries: appends are retried on the same producer id and sequence.)"""
        if not others or self.probe_after_s <= 0:
            return await request
        caller = asyncio.current_task()
        assert caller is not None
        waiting = _Waiting(caller, target, target_epoch, tuple(others), self._clock())
        self._waiting.add(waiting)
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
        try:
            return await request
        except asyncio.CancelledError:
            if waiting.moved is None:
                raise  # a cancellation of the caller's own
            caller.uncancel()
            raise waiting.moved from None
        finally:
            self._waiting.discard(waiting)

    async def close(self) -> None:
        """Stop the ticker and a round of questions still in flight (shielded from the
        ticker's cancellation): the client is closing its connections."""
        pending = [t for t in (self._ticker, self._round) if t is not None and not t.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _tick(self) -> None:
        """While requests wait: every ``probe_after_s``, ask about the slow ones' targets."""
        try:
            while self._waiting:
                await asyncio.sleep(self.probe_after_s)
                now = self._clock()
                slow = [w for w in self._waiting
                        if now - w.since >= self.probe_after_s and w.moved is None]
                if not slow:
                    continue
                await asyncio.gather(*(self._check(w) for w in slow))
        finally:
            self._ticker = None

    async def _check(self, waiting: _Waiting) -> None:
        found = await self._newer_leader(waiting.target, waiting.epoch, waiting.others)
        if found is not None and waiting in self._waiting and waiting.moved is None:
            waiting.moved = found
            waiting.task.cancel()

    async def _newer_leader(self, target: Endpoint, target_epoch: int,
                            others: Sequence[Endpoint]) -> LeaderMovedError | None:
        answers = await self._answers(others)
        best: LeaderMovedError | None = None
        for answer in answers:
            if not isinstance(answer, tuple):
                continue  # no answer in time, or an error: that node tells nothing
            leader_id, epoch = answer
            if leader_id < 0 or epoch <= target_epoch:
                continue
            endpoint = self.endpoint_of(leader_id)
            if endpoint is None or endpoint == target:
                continue
            if best is None or epoch > best.epoch:
                best = LeaderMovedError(leader_id, epoch, endpoint)
        return best

    async def _answers(
        self, others: Sequence[Endpoint]
    ) -> list[tuple[int, int] | BaseException | None]:
        """The answers of a round of questions to ``others``: the round in flight or a fresh
        one's if it is recent enough, else a new round."""
        now = self._clock()
        current = self._round
        if current is None or (current.done() and now - self._round_started
                               >= self.probe_after_s / 2):
            self._round_started = now
            self.rounds += 1
            current = asyncio.ensure_future(asyncio.gather(
                *(self.ask(endpoint, self.probe_timeout_s) for endpoint in others),
                return_exceptions=True))
            self._round = current
        return await asyncio.shield(current)
