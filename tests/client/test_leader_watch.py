"""LeaderWatch: a request waiting on a frozen leader is abandoned once another node names a
newer leader, and only then; concurrent waits share one round of questions."""

from __future__ import annotations

import asyncio

import pytest

from kraft_spark.client.leader_watch import LeaderMovedError, LeaderWatch

A, B, C = ("127.0.0.1", 1), ("127.0.0.1", 2), ("127.0.0.1", 3)
ENDPOINTS = {0: A, 1: B, 2: C}


class Quorum:
    """What each node answers to "who leads?": (leader id, epoch), or None (no answer)."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, int], tuple[int, int] | None] = {B: (0, 5), C: (0, 5)}
        self.asked = 0

    async def ask(self, endpoint: tuple[str, int], timeout_s: float) -> tuple[int, int] | None:
        self.asked += 1
        await asyncio.sleep(0)
        return self.answers[endpoint]


def watch(quorum: Quorum, probe_s: float = 0.01) -> LeaderWatch:
    return LeaderWatch(quorum.ask, ENDPOINTS.get, probe_after_s=probe_s, probe_timeout_s=probe_s)


def test_a_prompt_answer_asks_nobody() -> None:
    quorum = Quorum()

    async def body() -> None:
        async def request() -> str:
            return "ok"

        assert await watch(quorum).await_unless_replaced(
            request(), target=A, target_epoch=5, others=[B, C]) == "ok"

    asyncio.run(body())
    assert quorum.asked == 0


def test_a_newer_leader_abandons_the_request_and_names_where_to_go() -> None:
    quorum = Quorum()

    async def body() -> None:
        frozen = asyncio.get_running_loop().create_future()  # the old leader never answers
        flags: list[str] = []

        async def request() -> str:
            try:
                await frozen
            except asyncio.CancelledError:
                flags.append("cancelled")
                raise
            return "late"

        async def elect() -> None:
            await asyncio.sleep(0.05)
            quorum.answers[B] = (-1, 6)  # an election in progress: not enough to move
            await asyncio.sleep(0.05)
            quorum.answers[C] = (2, 6)  # node 2 won epoch 6

        electing = asyncio.create_task(elect())
        with pytest.raises(LeaderMovedError) as moved:
            await watch(quorum).await_unless_replaced(request(), target=A, target_epoch=5,
                                                      others=[B, C])
        await electing
        assert (moved.value.leader_id, moved.value.epoch, moved.value.endpoint) == (2, 6, C)
        assert flags == ["cancelled"]  # the request to the old leader is dropped

    asyncio.run(body())


def test_the_same_or_an_older_leader_does_not_move_the_request() -> None:
    quorum = Quorum()
    quorum.answers = {B: (0, 5), C: (1, 4)}  # the target itself, and a stale view

    async def body() -> None:
        async def request() -> str:
            await asyncio.sleep(0.1)
            return "slow but fine"

        assert await watch(quorum).await_unless_replaced(
            request(), target=A, target_epoch=5, others=[B, C]) == "slow but fine"

    asyncio.run(body())
    assert quorum.asked >= 2  # it did ask while waiting


def test_concurrent_waits_share_one_round_of_questions() -> None:
    quorum = Quorum()
    shared = watch(quorum, probe_s=0.05)

    async def body() -> None:
        async def request() -> str:
            await asyncio.sleep(0.08)
            return "ok"

        results = await asyncio.gather(*(
            shared.await_unless_replaced(request(), target=A, target_epoch=5, others=[B, C])
            for _ in range(50)))
        assert results == ["ok"] * 50

    asyncio.run(body())
    assert shared.rounds == 1 and quorum.asked == 2  # not 50 rounds of 2 questions


def test_a_leader_whose_address_is_unknown_cannot_be_followed() -> None:
    quorum = Quorum()
    quorum.answers = {B: (7, 9), C: None}  # node 7 leads, but nobody told us where it is

    async def body() -> None:
        async def request() -> str:
            await asyncio.sleep(0.05)
            return "answered"

        assert await watch(quorum).await_unless_replaced(
            request(), target=A, target_epoch=5, others=[B, C]) == "answered"

    asyncio.run(body())


def test_client_timeouts_follow_the_quorum_settings() -> None:
    from kraft_spark.client.timeouts import ClientTimeouts
    from kraft_spark.raft.config import QuorumConfig

    kafka = ClientTimeouts.for_quorum(QuorumConfig())
    # request timeout 2 s; fetch timeout 2 s + jitter 0.5 s + election 1 s + backoff 1 s + 2 s
    assert (kafka.request_timeout_s, kafka.retry_budget_s, kafka.leader_probe_s) == (2.0, 6.5,
                                                                                     0.25)
    fast = ClientTimeouts.for_quorum(QuorumConfig(
        fetch_timeout_ms=600, election_timeout_ms=300, election_backoff_max_ms=300,
        request_timeout_ms=400, fetch_max_wait_ms=200, fetch_timeout_jitter_ms=0))
    assert (fast.request_timeout_s, fast.retry_budget_s, fast.leader_probe_s) == (0.4, 1.6, 0.1)
    assert fast.client_kwargs() == {"request_timeout_s": 0.4, "retry_budget_s": 1.6,
                                    "leader_probe_s": 0.1}


def test_close_stops_a_round_of_questions_still_in_flight() -> None:
    """A round is shielded from the ticker's cancellation (requests share it), so close()
    must stop it itself: its questions would otherwise open connections after the client closed
    them all."""
    cancelled: list[tuple[str, int]] = []

    async def body() -> None:
        asked = asyncio.Event()

        async def ask(endpoint: tuple[str, int], timeout_s: float) -> tuple[int, int] | None:
            asked.set()
            try:
                await asyncio.sleep(3600)  # a node that does not answer
            except asyncio.CancelledError:
                cancelled.append(endpoint)
                raise
            return None

        shared = LeaderWatch(ask, ENDPOINTS.get, probe_after_s=0.01, probe_timeout_s=0.01)

        async def request() -> str:
            await asyncio.sleep(3600)
            return "never"

        waiting = asyncio.ensure_future(
            shared.await_unless_replaced(request(), target=A, target_epoch=5, others=[B, C]))
        await asyncio.wait_for(asked.wait(), 5)
        await shared.close()
        assert sorted(cancelled) == [B, C]  # by close() itself, not by the loop's end
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)

    asyncio.run(body())
    assert sorted(cancelled) == [B, C]
