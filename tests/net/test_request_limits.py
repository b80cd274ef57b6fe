"""What one peer's requests may cost a node: a bounded number of array elements per request,
and a bounded number of requests handled before the node's loop runs anything else. Found by
adversarial testing of a live quorum: an 8 MB Vote of 2.7 million empty topics held a leader's
loop for ~4 s, and ~5,800 pipelined DescribeQuorums per read for over the fetch timeout; both
cost the leader its leadership."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kraft_spark.net.frame_server import FrameServer, ServerConnection
from kraft_spark.net.node import RaftNode
from kraft_spark.protocol import ApiKey, ProtocolError
from kraft_spark.protocol.api import MAX_REQUEST_ARRAY_ELEMENTS, decode_request, encode_request
from kraft_spark.transport import FRAMES_PER_TURN

pytestmark = pytest.mark.timeout(60)


def _vote(topics: int) -> dict[str, Any]:
    partition = {"partition_index": 0, "candidate_epoch": 2, "candidate_id": 1,
                 "last_offset_epoch": 1, "last_offset": 10}
    return {"cluster_id": None,
            "topics": [{"topic_name": "", "partitions": [partition] if i == 0 else []}
                       for i in range(topics)]}


def test_a_request_with_too_many_array_elements_is_refused_before_it_is_built() -> None:
    ok = encode_request(ApiKey.VOTE, 0, 1, "t", _vote(MAX_REQUEST_ARRAY_ELEMENTS - 1))
    assert len(decode_request(ok[4:])[1]["topics"]) == MAX_REQUEST_ARRAY_ELEMENTS - 1
    hostile = encode_request(ApiKey.VOTE, 0, 1, "t", _vote(300_000))
    started = time.perf_counter()
    with pytest.raises(ProtocolError, match="300000 elements: more than this message may hold"):
        decode_request(hostile[4:])
    assert time.perf_counter() - started < 1.0  # refused on the count, before any element


def test_pipelined_requests_leave_the_loop_turns_between_slices() -> None:
    """1,000 requests arrive in one read; the loop must run other work (here: a callback
    scheduled when the first request is handled) after at most two slices, not after all."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        handled: list[int] = []
        ticked_at: list[int] = []

        def handler(conn: ServerConnection, header: Any, request: Any) -> None:
            if not handled:
                loop.call_soon(lambda: ticked_at.append(len(handled)))
            handled.append(header.correlation_id)

        server = FrameServer("127.0.0.1", 0, handler)
        await server.start()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            request = {"topics": [{"topic_name": "__cluster_metadata",
                                   "partitions": [{"partition_index": 0}]}]}
            frames = b"".join(encode_request(ApiKey.DESCRIBE_QUORUM, 0, i, "t", request)
                              for i in range(1000))
            assert len(frames) < 256 * 1024  # one read
            writer.write(frames)
            await writer.drain()
            for _ in range(500):
                if len(handled) == 1000:
                    break
                await asyncio.sleep(0.01)
            assert handled == list(range(1000))  # all of them, in order
            assert ticked_at and ticked_at[0] <= 2 * FRAMES_PER_TURN
            writer.close()
        finally:
            await server.close()

    asyncio.run(body())


async def _api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        corr: int) -> bool:
    """One ApiVersions round trip on a raw connection; False when the server closed it."""
    writer.write(encode_request(ApiKey.API_VERSIONS, 0, corr, "t", {}))
    try:
        await writer.drain()
        size = await asyncio.wait_for(reader.readexactly(4), 5)
        await reader.readexactly(int.from_bytes(size, "big"))
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    return True


def test_connections_over_the_maximum_are_closed_at_once() -> None:
    async def body() -> None:
        server = FrameServer("127.0.0.1", 0, lambda *_: None, max_connections=2)
        await server.start()
        try:
            first = await asyncio.open_connection("127.0.0.1", server.port)
            second = await asyncio.open_connection("127.0.0.1", server.port)
            assert await _api_versions(*first, 1) and await _api_versions(*second, 1)
            third_reader, third_writer = await asyncio.open_connection("127.0.0.1", server.port)
            assert await asyncio.wait_for(third_reader.read(), 5) == b""  # closed by the server
            assert server.refused_connections == 1
            assert await _api_versions(*first, 2) and await _api_versions(*second, 2)
            first[1].close()
            for _ in range(100):  # the server notices the close, then a slot is free again
                if not server._connections or len(server._connections) < 2:
                    break
                await asyncio.sleep(0.01)
            fourth = await asyncio.open_connection("127.0.0.1", server.port)
            assert await _api_versions(*fourth, 1)
            for _, writer in (second, fourth):
                writer.close()
            third_writer.close()
        finally:
            await server.close()

    asyncio.run(body())


def test_a_silent_connection_is_closed_after_the_idle_timeout() -> None:
    """A peer that sends nothing (or trickles nothing) is closed; one that keeps sending stays.
    Kafka's connections.max.idle.ms, here 0.4 s."""

    async def body() -> None:
        server = FrameServer("127.0.0.1", 0, lambda *_: None, idle_timeout_s=0.4)
        await server.start()
        try:
            silent_reader, silent_writer = await asyncio.open_connection("127.0.0.1",
                                                                         server.port)
            busy = await asyncio.open_connection("127.0.0.1", server.port)
            for corr in range(15):  # 1.5 s, several idle periods
                assert await _api_versions(*busy, corr), f"busy connection closed at {corr}"
                await asyncio.sleep(0.1)
            assert await asyncio.wait_for(silent_reader.read(), 5) == b""
            assert server.idle_closed == 1
            silent_writer.close()
            busy[1].close()
        finally:
            await server.close()

    asyncio.run(body())


def test_a_client_goes_on_after_its_idle_connection_was_closed(tmp_path: Path) -> None:
    """The node closes a client's idle connection; the client's next call still succeeds
    (it reconnects) and nothing is lost."""
    from kraft_spark.client import AsyncQuorumClient, NewRecord

    from .helpers import FAST, leader_of, make_nodes, run_nodes

    nodes = make_nodes(tmp_path, quorum=FAST)
    # Above the time a follower's Fetch may wait at the leader, as the config check requires.
    nodes = [RaftNode(replace(n.config, connections_max_idle_ms=1000)) for n in nodes]

    async def body(nodes: list[RaftNode]) -> None:
        client = AsyncQuorumClient([f"127.0.0.1:{n.port}" for n in nodes])
        first = await client.append([NewRecord(b"k", b"1")])
        await asyncio.sleep(1.6)  # > 1.25 x 1 s: the leader closed our connection
        leader = leader_of(nodes)
        assert leader is not None and leader._server is not None
        assert leader._server.idle_closed >= 1
        second = await client.append([NewRecord(b"k", b"2")])
        assert second.base_offset == first.base_offset + 1
        records = await client.read(first.base_offset, 2)
        assert [r.value for r in records] == [b"1", b"2"]
        await client.close()

    asyncio.run(run_nodes(nodes, body))


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_due_timer_is_not_postponed_by_a_stream_of_requests(
    tmp_path: Path, loop_kind: str
) -> None:
    """Once something is overdue (a parked Fetch's MaxWaitMs), every Ready's deadline is
    "now", a new value each millisecond. Two connections' pipelined requests, handled in
    slices with a loop turn between them, re-armed the node's timer with each: it was
    cancelled before it ever ran, the parked Fetches went unanswered, and the followers
    elected a new leader (6 connections of DescribeQuorums, at a responsive leader)."""
    import uvloop

    from kraft_spark.net.node import wall_ms

    from .helpers import make_nodes

    node = make_nodes(tmp_path, 1)[0]
    slices = [0]  # slices of requests handled so far
    fired: list[int] = []  # the slice count when the timer ran

    def on_timer() -> None:
        node._timer = None
        node._timer_at = -1
        fired.append(slices[0])

    node._on_timer = on_timer  # type: ignore[method-assign]

    async def connection(turns: int) -> None:
        for _ in range(turns):
            if fired:
                return
            # What RaftCore.next_deadline says once something is overdue: "now", a new
            # value each millisecond (here: a new overdue value each slice, whatever the pace).
            slices[0] += 1
            node._arm_timer(wall_ms() - slices[0])
            await asyncio.sleep(0)  # the next slice of requests waits for a loop turn

    async def body() -> None:
        node._arm_timer(wall_ms() + 5)
        time.sleep(0.02)  # busy: the timer comes due while the loop cannot run it
        await asyncio.gather(*(connection(2000) for _ in range(2)))
        # It ran within the first loop turns, not only once the requests stopped (4,000).
        assert fired and fired[0] <= 4, f"the due timer ran only after {fired} slices"

    factory = uvloop.new_event_loop if loop_kind == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(body())
