"""The node's local request path (``RaftNode.submit_local``: replies to a local token call
back; ``local_answer`` with a future) and ``NodeBackend``'s use of it: error mapping,
coalescing, leadership loss, stop."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from api.local_appends import produce_result
from api.node_backend import NodeBackend
from kraft_spark.client.errors import (
    ClientError,
    CommitTimeoutError,
    InvalidRecordError,
    RecordTooLargeError,
)
from kraft_spark.client.types import AppendResult, NewRecord
from kraft_spark.net.local_requests import NodeStoppedError, local_answer
from kraft_spark.net.node import RaftNode
from kraft_spark.raft.messages import (
    CLIENT_REPLICA_ID,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)
from kraft_spark.raft.records import Record
from tests.net.helpers import FAST, STEADY, alone_as_leader, run_quorum, the_leader

pytestmark = pytest.mark.timeout(60)


# --------------------------------------------------------------------------- error mapping


def test_produce_result_maps_the_core_answer_like_the_client() -> None:
    ok = ProduceResponse(ErrorCode.NONE, 0, 4, base_offset=7, last_offset=9, epoch=3)
    assert produce_result(ok) == AppendResult(7, 9, 3)
    cases: list[tuple[ErrorCode, type[Exception]]] = [
        (ErrorCode.MESSAGE_TOO_LARGE, RecordTooLargeError),
        (ErrorCode.INVALID_RECORD, InvalidRecordError),
        (ErrorCode.CORRUPT_MESSAGE, InvalidRecordError),
        # Handed over while leading: lost leadership or a timeout leaves the outcome unknown.
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, CommitTimeoutError),
        (ErrorCode.REQUEST_TIMED_OUT, CommitTimeoutError),
        (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ClientError),
    ]
    for code, error in cases:
        with pytest.raises(error) as info:
            produce_result(ProduceResponse(code, 0, 4, message="why"))
        assert type(info.value) is error, code
    with pytest.raises(ClientError):
        produce_result(DescribeQuorumResponse(ErrorCode.NONE, 0, 4))


# --------------------------------------------------------------------------- real nodes


def test_submit_local_answers_produce_fetch_and_describe(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        node = nodes[0]
        assert node.is_leader
        records = (Record(b"k", b"v", 1), Record(b"k2", None, 1))
        answer = await local_answer(node, ProduceRequest(records, timeout_ms=5000))
        assert isinstance(answer, ProduceResponse) and answer.error == ErrorCode.NONE
        assert answer.last_offset == answer.base_offset + 1
        assert node.high_watermark > answer.last_offset
        assert node.stats.appended_records == 2

        fetch = FetchRequest(node.cluster_id, CLIENT_REPLICA_ID, -1, answer.base_offset, -1, 0,
                             1 << 20)
        read = await local_answer(node, fetch)
        assert isinstance(read, FetchResponse) and read.error == ErrorCode.NONE
        assert [r.key for b in read.batches for r in b.records] == [b"k", b"k2"]

        described = await local_answer(node, DescribeQuorumRequest())
        assert isinstance(described, DescribeQuorumResponse)
        assert described.error == ErrorCode.NONE and described.leader_id == node.node_id

        # Local and remote tokens mix: nothing is left waiting.
        assert not node._local

    asyncio.run(run_quorum(tmp_path, body, count=1))


def test_backend_coalesces_appends_of_one_iteration_into_one_batch(tmp_path: Path) -> None:
    """The first append goes at once (nothing in flight); the 49 that follow in the same loop
    turn share one batch, even though the first one commits before they arrive (one voter)."""
    async def body(nodes: list[RaftNode]) -> None:
        backend = NodeBackend(nodes[0])
        try:
            results = await asyncio.gather(*(
                backend.append([NewRecord(f"k{i}".encode(), b"x")] * (1 + i % 3))
                for i in range(50)
            ))
            assert backend.local_appends.batches_sent == 2 and backend.local_batches == 2
            assert backend.local_appends.appends_sent == 50
            # Each append keeps its own contiguous slice, in call order.
            for i, (prev, cur) in enumerate(itertools.pairwise(results)):
                assert cur.base_offset == prev.last_offset + 1
                assert cur.last_offset - cur.base_offset + 1 == 1 + (i + 1) % 3
            read = await backend.read(results[0].base_offset, 1000)
            assert [r.offset for r in read] == list(
                range(results[0].base_offset, results[-1].last_offset + 1))
            assert read[results[5].base_offset - results[0].base_offset].key == b"k5"
            info = await backend.describe_quorum()
            assert info.leader_id == 0 and info.high_watermark > results[-1].last_offset
            assert backend.forwarded_batches == 0
        finally:
            await backend.close()

    asyncio.run(run_quorum(tmp_path, body, count=1))


def test_backend_refused_shared_batch_is_split_and_only_the_culprit_fails(
    tmp_path: Path,
) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        backend = NodeBackend(nodes[0])
        try:
            small = [NewRecord(b"k", b"v" * 400)]
            results = await asyncio.gather(
                backend.append(small), backend.append(small), backend.append(small),
                backend.append([NewRecord(b"big", b"v" * 2000)]), return_exceptions=True,
            )
            assert [type(r) for r in results[:3]] == [AppendResult] * 3
            assert isinstance(results[3], RecordTooLargeError)
            # One shared batch refused as too large, then each append on its own.
            assert backend.local_appends.batches_sent == 5
        finally:
            await backend.close()

    asyncio.run(run_quorum(tmp_path, body, count=1, quorum=replace(FAST, max_batch_bytes=1000)))


def test_leadership_lost_after_handover_is_a_commit_timeout_never_a_retry(
    tmp_path: Path,
) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = await alone_as_leader(nodes)
        backend = NodeBackend(leader)
        try:
            end = leader.log.end_offset()
            # Cannot commit without a follower; check-quorum makes the leader resign.
            with pytest.raises(CommitTimeoutError, match="NOT_LEADER_OR_FOLLOWER"):
                await backend.append([NewRecord(b"k", b"v")], timeout_s=20)
            assert not leader.is_leader
            assert leader.log.end_offset() == end + 1  # it was appended here, once
            assert backend.local_batches == 1 and backend.forwarded_batches == 0
        finally:
            await backend.close()

    asyncio.run(run_quorum(tmp_path, body))


def test_commit_not_confirmed_in_time_is_a_commit_timeout(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = await alone_as_leader(nodes)
        backend = NodeBackend(leader)
        try:
            with pytest.raises(CommitTimeoutError, match="REQUEST_TIMED_OUT"):
                await backend.append([NewRecord(b"k", b"v")], timeout_s=0.2)
            assert backend.forwarded_batches == 0
        finally:
            await backend.close()

    asyncio.run(run_quorum(tmp_path, body))


def test_stop_fails_local_requests_still_waiting(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = await alone_as_leader(nodes)
        waiting = local_answer(leader, ProduceRequest((Record(b"k", b"v", 1),), timeout_ms=20_000))
        await leader.stop(graceful=False)
        with pytest.raises(NodeStoppedError):
            await waiting
        with pytest.raises(NodeStoppedError):
            local_answer(leader, DescribeQuorumRequest())
        assert not leader.is_leader

    asyncio.run(run_quorum(tmp_path, body))


def test_a_follower_backend_forwards_and_reads_through_the_leader(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        backend = NodeBackend(follower)
        try:
            result = await backend.append([NewRecord(b"f", b"1")])
            assert backend.forwarded_batches == 1 and backend.local_batches == 0
            assert result.epoch == leader.core.epoch
            records = await backend.read(result.base_offset)
            assert [(r.offset, r.key) for r in records] == [(result.base_offset, b"f")]
            info = await backend.describe_quorum()
            # The leader's answer, at its epoch or a later one (a slow machine may elect again).
            assert info.cluster_id == "test-cluster" and info.leader_epoch >= result.epoch
            assert info.leader_id in {n.node_id for n in nodes}
        finally:
            await backend.close()

    asyncio.run(run_quorum(tmp_path, body))


# --------------------------------------------------------------------------- callbacks


def test_callbacks_run_from_the_answer_and_may_submit_again(tmp_path: Path) -> None:
    """``submit_local``: the answer reaches the callback inside the node's handling of
    it; a submission from the callback completes on the next loop turn, after the Ready that
    answered (the high watermark the node reports never moves back)."""
    async def body(nodes: list[RaftNode]) -> None:
        node = nodes[0]
        watermarks: list[int] = []
        node.add_commit_listener(watermarks.append)
        answers: list[ProduceResponse] = []
        done = asyncio.get_running_loop().create_future()

        def callback(response: Any, error: BaseException | None) -> None:
            assert error is None and isinstance(response, ProduceResponse)
            answers.append(response)
            if len(answers) < 5:
                node.submit_local(
                    ProduceRequest((Record(b"k", b"v", 1),), timeout_ms=5000), callback)
            elif not done.done():
                done.set_result(None)

        node.submit_local(ProduceRequest((Record(b"k", b"v", 1),), timeout_ms=5000),
                                   callback)
        await asyncio.wait_for(done, 10)
        assert [a.error for a in answers] == [ErrorCode.NONE] * 5
        assert [a.base_offset for a in answers] == list(
            range(answers[0].base_offset, answers[0].base_offset + 5))
        assert watermarks == sorted(watermarks) and node.high_watermark > answers[-1].last_offset
        assert not node._local

    asyncio.run(run_quorum(tmp_path, body, count=1))


def test_stop_calls_back_local_requests_still_waiting(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = await alone_as_leader(nodes)
        told: list[tuple[Any, BaseException | None]] = []
        leader.submit_local(
            ProduceRequest((Record(b"k", b"v", 1),), timeout_ms=20_000),
            lambda response, error: told.append((response, error)))
        await leader.stop(graceful=False)
        assert len(told) == 1 and told[0][0] is None
        assert isinstance(told[0][1], NodeStoppedError)

    asyncio.run(run_quorum(tmp_path, body))


def test_appends_of_one_loop_turn_share_the_next_batch(tmp_path: Path) -> None:
    async def body(nodes: list[RaftNode]) -> None:
        leader = the_leader(nodes)
        backend = NodeBackend(leader)
        try:
            # One loop turn: the first goes at once, the other 19 share the next batch.
            results = await asyncio.wait_for(asyncio.gather(*(
                backend.append([NewRecord(f"k{i}".encode(), b"x")] * 2, timeout_s=10)
                for i in range(20))), 10)
            assert backend.local_batches == 2 and backend.local_appends.appends_sent == 20
            for prev, cur in itertools.pairwise(results):
                assert cur.base_offset == prev.last_offset + 1
                assert cur.last_offset == cur.base_offset + 1
            read = await backend.read(results[0].base_offset, 100)
            assert [r.key for r in read][:4] == [b"k0", b"k0", b"k1", b"k1"]
        finally:
            await backend.close()

    asyncio.run(run_quorum(tmp_path, body, quorum=STEADY))  # not about elections
