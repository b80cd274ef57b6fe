"""Locks under partition on `kraft-spark local` (real node processes, each serving the HTTP
API): a holder cut off from the quorum learns it lost the lock by its own clock, without
waiting to reconnect; keep-alives fail over to another node; `kraft-spark lock` stops its
command when the lock is lost.

One quorum for the module; each test uses a lock name of its own and leaves every node running
(a frozen node is always thawed)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft_spark.client.concurrency import Lock
from kraft_spark.client.kv import AsyncKvClient, KvClient
from kraft_spark.client.session import own_clock
from tests.lincheck.nemesis import KvQuorum
from tests.net.helpers import free_ports

from .harness import CuttableProxy, running, store_ready

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


COMMAND = textwrap.dedent("""
    import os, pathlib, signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # makes kraft-spark lock escalate to SIGKILL
    pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
    time.sleep(600)
""")


def test_kraft_spark_lock_stops_its_command_when_its_connection_is_cut(
        quorum: KvQuorum, tmp_path: Path) -> None:
    """The lock's only way to the quorum is a proxy that then drops every connection: the
    command (which ignores SIGTERM) is killed after the grace, stderr says why, exit ≠ 0."""
    node = followers(quorum)[0]
    target = int(quorum.http_urls[node].rsplit(":", 1)[1])
    proxy = CuttableProxy(free_ports(1)[0], target)
    ready = tmp_path / "pid"
    env = {**os.environ, "KRAFT_SPARK_HTTP_TOKEN": quorum.token or ""}
    lock = subprocess.Popen(
        [sys.executable, "-m", "kraft_spark", "lock", "cut", "--ttl-ms", str(TTL_MS),
         "--grace-s", "1", "--endpoint", f"http://127.0.0.1:{proxy.listen_port}", "--",
         sys.executable, "-c", COMMAND, str(ready)],
        stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    command_pid = 0
    try:
        deadline = time.monotonic() + 30
        while not (ready.exists() and ready.read_text()):
            assert lock.poll() is None, lock.communicate()[1]
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        command_pid = int(ready.read_text())
        proxy.set_cut(True)
        start = time.monotonic()
        _, err = lock.communicate(timeout=TTL_MS / 1000 + 1 + SLACK_S + 5)
        took = time.monotonic() - start
        assert lock.returncode == 128 + signal.SIGKILL, (lock.returncode, err)
        assert "kraft-spark lock: lost the lock cut/" in err, err
        assert "is stale: stopping the command (SIGTERM" in err, err
        with pytest.raises(ProcessLookupError):
            os.kill(command_pid, 0)
        print(f"\ncut connection: command killed {took:.2f} s after the cut "
              f"(TTL {TTL_MS / 1000} s + grace 1 s)")
    finally:
        proxy.close()
        if lock.poll() is None:
            os.killpg(lock.pid, signal.SIGKILL)
            lock.wait()
        if command_pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(command_pid, signal.SIGKILL)


POLITE = textwrap.dedent("""
    import os, pathlib, signal, sys, time
    work = pathlib.Path(sys.argv[1])
    def stop(signum, frame):
        (work / "stopped").write_text(signal.Signals(signum).name)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    (work / "pid").write_text(str(os.getpid()))
    time.sleep(600)
""")


def test_a_signal_to_kraft_spark_lock_reaches_its_command_and_the_lock_is_released(
        quorum: KvQuorum, tmp_path: Path) -> None:
    """The command runs in a process group of its own (to be stopped whole when the lock is
    lost), so what `kraft-spark lock` is sent is passed on to it; the lock goes when it
    exits."""
    env = {**os.environ, "KRAFT_SPARK_HTTP_TOKEN": quorum.token or ""}
    lock = subprocess.Popen(
        [sys.executable, "-m", "kraft_spark", "lock", "polite", "--endpoint",
         ",".join(quorum.http_urls), "--", sys.executable, "-c", POLITE, str(tmp_path)],
        stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not ((tmp_path / "pid").exists() and (tmp_path / "pid").read_text()):
            assert lock.poll() is None, lock.communicate()[1]
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        lock.send_signal(signal.SIGTERM)
        _, err = lock.communicate(timeout=30)
        assert lock.returncode == 0, err
        assert (tmp_path / "stopped").read_text() == "SIGTERM"
        with KvClient(quorum.http_urls, token=quorum.token) as kv:
            assert list(kv.range("polite/")) == []
    finally:
        if lock.poll() is None:
            os.killpg(lock.pid, signal.SIGKILL)
            lock.wait()
