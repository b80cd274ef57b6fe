"""The store client's pieces without a server: keys in URLs, endpoint rotation, the event
stream's lines, and a lease session's own deadline (real processes: tests/integration/
test_kv_keys_local.py and test_locks_local.py)."""

from __future__ import annotations

import asyncio
from urllib.parse import unquote

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_spark.client.endpoints import Endpoints, key_path, parse_endpoints
from kraft_spark.client.kv import _SseLines
from kraft_spark.client.kv_types import KvError, LeaseInfo
from kraft_spark.client.session import Session

TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
               min_size=1)


@given(TEXT)
def test_a_key_is_one_path_segment_that_decodes_back_and_survives_httpx(key: str) -> None:
    path = key_path(key)
    segment = path.removeprefix("/v1/kv/")
    assert "/" not in segment and "?" not in segment and "#" not in segment
    assert unquote(segment) == key
    # httpx sends it as it is: no dot segment removed, nothing re-encoded
    assert httpx.URL("http://h" + path).raw_path == path.encode("ascii")


def test_endpoints_parse_and_rotate() -> None:
    assert parse_endpoints(" http://a:1/ ,http://b:2,") == ["http://a:1", "http://b:2"]
    endpoints = Endpoints(["http://a", "http://b", "http://c"])
    assert endpoints.order() == ["http://a", "http://b", "http://c"]
    endpoints.failed("http://a")
    endpoints.failed("http://a")  # a second report of the same failure moves nothing
    assert endpoints.current == "http://b"
    assert endpoints.order() == ["http://b", "http://c", "http://a"]


@settings(max_examples=200)
@given(st.lists(st.integers(min_value=0, max_value=60), max_size=6))
def test_event_stream_lines_end_at_crlf_lf_cr_only_wherever_chunks_split(
        cuts: list[int]) -> None:
    stream = ('event: put\r\ndata: {"key":"a\x85b\u2028c\x1cd\x0be"}\r\n\r\n'
              "event: progress\rdata: {}\r\revent: x\ndata: é\n\n").encode()
    chunks, start = [], 0
    for cut in sorted(set(cuts)):
        chunks.append(stream[start:cut])
        start = max(start, cut)
    chunks.append(stream[start:])
    lines = _SseLines()
    got = [line for chunk in chunks if chunk for line in lines.feed(chunk)]
    assert got == ['event: put', 'data: {"key":"a\x85b\u2028c\x1cd\x0be"}', "",
                   "event: progress", "data: {}", "", "event: x", "data: é", ""]


class FrozenNode:
    """Grants, then never answers a keep-alive (a SIGSTOPped node with an open socket)."""

    def __init__(self, answer: BaseException | None = None) -> None:
        self.answer = answer
        self.calls = 0

    async def grant_lease(self, ttl_ms: int) -> LeaseInfo:
        return LeaseInfo(7, ttl_ms)

    async def keep_alive(self, lease_id: int, *, timeout_s: float | None = None) -> LeaseInfo:
        self.calls += 1
        if self.answer is not None:
            raise self.answer
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def revoke_lease(self, lease_id: int) -> None:
        await asyncio.sleep(3600)


def test_a_session_is_lost_by_its_own_clock_when_no_keep_alive_is_answered() -> None:
    async def body() -> None:
        session = await Session(FrozenNode(), 600).start()
        reason = await asyncio.wait_for(session.done(), 5)
        assert "no keep-alive acknowledged within the TTL (600 ms" in reason
        assert session.remaining_s() == 0.0
        await asyncio.wait_for(session.close(), 5)  # a revoke that hangs is given up

    asyncio.run(body())


def test_a_404_loses_the_session_at_once() -> None:
    async def body() -> None:
        node = FrozenNode(KvError(404, "lease 7 not found", {}))
        session = await Session(node, 3000).start()  # first keep-alive after TTL/3
        assert "404" in await asyncio.wait_for(session.done(), 2.5)  # before the TTL ran out
        assert node.calls == 1

    asyncio.run(body())
