"""A leader that dies without resigning, with Kafka's default timeouts, on real sockets: its
port stops listening, the followers' Fetches are refused, and they elect a new leader without
sitting out the whole fetch timeout (``RaftCore.on_request_failed``)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from kraft_spark.client import AsyncQuorumClient, NewRecord
from kraft_spark.net.node import RaftNode
from kraft_spark.raft.config import QuorumConfig

from .helpers import leader_of, run_quorum, wait_for

pytestmark = pytest.mark.timeout(120)


def test_dead_leader_is_replaced_and_the_new_one_commits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kraft_spark.net.node")

    async def body(nodes: list[RaftNode]) -> None:
        old = leader_of(nodes)
        assert old is not None
        rest = [n for n in nodes if n is not old]
        client = AsyncQuorumClient([f"127.0.0.1:{n.port}" for n in nodes], retry_budget_s=20)
        try:
            before = await client.append([NewRecord(b"k", b"before")])
            await wait_for(lambda: all(n.high_watermark > before.last_offset for n in rest), 10,
                           "followers to learn the commit")
            # Like kill -9 as far as the peers can tell: the listener and every connection
            # close at once and nothing is handed over.
            await old.stop(graceful=False)
            await wait_for(lambda: leader_of(rest) is not None, 10, "a new leader")
            after = await client.append([NewRecord(b"k", b"after")], timeout_s=10)
            assert after.epoch > before.epoch
            assert after.base_offset > before.last_offset
            records = await client.read(0, 100)
            assert [r.value for r in records if r.key == b"k"] == [b"before", b"after"]
        finally:
            await client.close()

    asyncio.run(run_quorum(tmp_path, body, quorum=QuorumConfig()))
    messages = [r.getMessage() for r in caplog.records]
    # The followers saw the refusal (not only a fetch timeout) and moved their election up.
    assert any("refused a connection: campaigning in" in m for m in messages), messages[-20:]
