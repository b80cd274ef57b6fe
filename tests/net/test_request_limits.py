"""What one peer's requests may cost a node: a bounded number of array elements per request,
and a bounded number of requests handled before the node's loop runs anything else. Found by
adversarial testing of a live quorum: an 8 MB Vote of 2.7 million empty topics held a leader's
loop for ~4 s, and ~5,800 pipelined DescribeQuorums per read for over the fetch timeout; both
cost the leader its leadership."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kraft_spark.net.transport import FRAMES_PER_TURN, FrameServer, ServerConnection
from kraft_spark.protocol import ApiKey, ProtocolError
from kraft_spark.protocol.api import MAX_REQUEST_ARRAY_ELEMENTS, decode_request, encode_request

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
