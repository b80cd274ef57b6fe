"""Locks under partition on `kraft-spark local` (real node processes, each serving the HTTP
API): a holder cut off from the quorum learns it lost the lock by its own clock, without
waiting to reconnect; keep-alives fail over to another node.

One quorum for the module; each test uses a lock name of its own and leaves every node running
(a frozen node is always thawed)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator

import pytest

from kraft_spark.client.concurrency import Lock
from kraft_spark.client.kv import AsyncKvClient, KvClient
from kraft_spark.client.session import own_clock
from tests.lincheck.nemesis import KvQuorum

from .harness import running, store_ready

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TTL_MS = 2000
# How long past the TTL a holder may take to notice: scheduling on a loaded 2-core machine,
# not a tuned figure (the session checks its deadline on its own timer).
SLACK_S = 3.0


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvQuorum]:
    quorum = KvQuorum(tmp_path_factory.mktemp("locks") / "data")
    with running(quorum):
        store_ready(quorum)
        yield quorum


def followers(quorum: KvQuorum) -> list[int]:
    """The nodes that do not lead now (a leader may change later; the tests do not need it
    to stay put, only to freeze a node that is not the only way to a quorum)."""
    with KvClient(quorum.http_urls, token=quorum.token, timeout_s=5) as kv:
        leader = int(kv._http.get(kv.endpoints.current + "/v1/quorum").json()["leaderId"])
    return [i for i in range(len(quorum.http_urls)) if i != leader]


@contextlib.contextmanager
def frozen(quorum: KvQuorum, node: int) -> Iterator[None]:
    os.kill(quorum.pid(node), signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(quorum.pid(node), signal.SIGCONT)


async def gone(url: str, token: str | None, key: str, timeout_s: float) -> None:
    """Until ``key`` is deleted, as the quorum sees it through ``url``."""
    async with AsyncKvClient(url, token=token, timeout_s=5) as kv:
        deadline = time.monotonic() + timeout_s
        while await kv.get(key) is not None:
            assert time.monotonic() < deadline, f"{key} still there after {timeout_s} s"
            await asyncio.sleep(0.2)


def test_a_holder_whose_node_is_frozen_learns_by_its_own_clock_that_it_lost_the_lock(
        quorum: KvQuorum) -> None:
    """Its only node is frozen (SIGSTOP): no answer, no error, no 404 ever comes; the holder
    must still see the loss once the TTL passed since its last acknowledged keep-alive."""
    node, other = followers(quorum)

    async def body() -> tuple[float, float]:
        async with AsyncKvClient(quorum.http_urls[node], token=quorum.token) as kv:
            lock = Lock(kv, "frozen-node", ttl_ms=TTL_MS)
            held = await lock.acquire()
            assert not held.stale and held.reason is None
            with frozen(quorum, node):
                start = own_clock()
                reason = await asyncio.wait_for(held.wait_lost(),
                                                TTL_MS / 1000 + SLACK_S)
                took = own_clock() - start
                assert held.session is not None
                late = own_clock() - held.session.expires_at  # after its own deadline
                assert held.lost.is_set() and "no keep-alive acknowledged within the TTL" in reason
                # and the quorum did expire it: the holder's view was not early by much
                await gone(quorum.http_urls[other], quorum.token, held.key, 15)
            await lock.release()
            return took, late

    took, late = asyncio.run(body())
    print(f"\nfrozen node: loss seen {took:.2f} s after the freeze, {late * 1000:.0f} ms after "
          f"the TTL ran out by the holder's clock (TTL {TTL_MS / 1000} s)")


def test_keep_alives_fail_over_to_another_node_when_the_first_is_frozen(
        quorum: KvQuorum) -> None:
    node, other = followers(quorum)
    urls = [quorum.http_urls[node], quorum.http_urls[other]]

    async def body() -> None:
        async with AsyncKvClient(urls, token=quorum.token) as kv:
            lock = Lock(kv, "failover", ttl_ms=TTL_MS)
            held = await lock.acquire()
            with frozen(quorum, node):
                await asyncio.sleep(3 * TTL_MS / 1000)  # three TTLs on the second node alone
                assert not held.stale, held.reason
                assert kv.endpoints.current == quorum.http_urls[other]
                async with AsyncKvClient(quorum.http_urls[other], token=quorum.token) as peek:
                    assert await peek.get(held.key) is not None
            assert not held.stale
            await lock.release()
            await gone(quorum.http_urls[other], quorum.token, held.key, 15)

    asyncio.run(body())
