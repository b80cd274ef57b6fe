"""The lease bench's lock points: N contenders acquiring and releasing one lock for a fixed time.

Two ways, each the same for both systems, the contenders spread round-robin over the members:

* ``cli``: every acquisition is a process, ``kraft-spark lock --endpoint URL NAME -- true``
  against ``etcdctl --endpoints URL lock NAME true`` (each grants a lease, takes the lock, runs
  ``true``, releases, revokes). The latency is the process's whole life, spawn to exit, so the
  process start is part of both (a Python program against a Go binary).
* ``in-process``: contenders are asyncio tasks in this process, each with its own HTTP client:
  kraft-spark's ``kraft_spark.client.concurrency.Lock`` on ``AsyncKvClient`` against etcd's
  lock service through its gateway with httpx (``/v3/lease/grant``, ``/v3/lock/lock``,
  ``/v3/lock/unlock``, ``/v3/lease/revoke``: the same steps as ``etcdctl lock``). The latency is
  from the start of an acquisition (the lease grant included) until the lock is held. Each
  holder is checked against the others: ``overlaps`` counts an acquisition while another
  contender of this process held the lock, and must stay 0.

kraft-spark's contenders send a write token of the quorum's credentials (``bench.credentials``;
locks are leases and conditional writes): the command line finds it in
``$KRAFT_SPARK_HTTP_TOKEN``, as a user's script would pass it (not on the command line, where
``ps`` shows it), and the in-process clients take it as ``AsyncKvClient(token=...)``. etcd runs
without authentication, as packaged.

No new acquisition starts after the point's deadline, but the ones in flight then are let
finish (a process killed while it waits would leave its lease to expire and hold the next point
up): throughput is every acquisition over the time until the last one finished, since under
contention a single acquisition may take seconds and a count cut at the deadline would say
more about the deadline than about the lock.
"""

from __future__ import annotations

import asyncio
import base64
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from bench.lease_stats import LockTally, lock_row

LOCK_NAME = "bench/lock"
TTL_S = 10
Log = Callable[[str], None]
Cycle = Callable[[int, LockTally], Awaitable[bool]]


def kraft_spark_command() -> list[str]:
    """The ``kraft-spark`` console script beside this interpreter (what a user runs), else the
    module through this interpreter."""
    script = os.path.join(os.path.dirname(sys.executable), "kraft-spark")
    if os.access(script, os.X_OK):
        return [script]
    found = shutil.which("kraft-spark")
    return [found] if found else [sys.executable, "-m", "kraft_spark"]


async def _run_point(cycle: Cycle, contenders: int, seconds: float) -> LockTally:
    """``cycle(contender, tally)`` in a loop per contender until the deadline; it returns
    whether the acquisition went through (else it counted an error)."""
    tally = LockTally()
    began = time.monotonic()
    deadline = began + seconds

    async def contender(i: int) -> None:
        while time.monotonic() < deadline:
            if await cycle(i, tally):
                tally.completed += 1

    await asyncio.gather(*(contender(i) for i in range(contenders)))
    tally.elapsed_s = time.monotonic() - began
    return tally


# --------------------------------------------------------------------------- cli


def _children_cpu_s() -> float:
    """CPU seconds of every child process reaped so far: the command lines' own cost."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli_cycle(argv: Callable[[int], list[str]], env: dict[str, str] | None = None) -> Cycle:
    """One acquisition: a process running ``argv(i)`` (in ``env``, else this environment)."""
    async def cycle(i: int, tally: LockTally) -> bool:
        began = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv(i), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env=env)
        if await proc.wait() != 0:
            tally.errors += 1
            await asyncio.sleep(0.1)  # do not spin on a failing command
            return False
        tally.latencies_s.append(time.monotonic() - began)
        return True
    return cycle


def kraft_cli(urls: list[str], token: str) -> Cycle:
    """``kraft-spark lock``, its token in ``$KRAFT_SPARK_HTTP_TOKEN``."""
    from kraft_spark.commands.http_token import TOKEN_ENV

    base = kraft_spark_command()
    env = {**os.environ, TOKEN_ENV: token}
    return cli_cycle(lambda i: [*base, "lock", "--endpoint", urls[i % len(urls)], LOCK_NAME,
                                "--", "true"], env)


def etcd_cli(urls: list[str]) -> Cycle:
    return cli_cycle(lambda i: ["etcdctl", "--endpoints", urls[i % len(urls)], "lock",
                                LOCK_NAME, "true"])


# --------------------------------------------------------------------------- in-process


async def kraft_in_process(urls: list[str], contenders: int, seconds: float,
                           token: str) -> LockTally:
    from kraft_spark.client.concurrency import Lock
    from kraft_spark.client.kv import AsyncKvClient

    clients = [AsyncKvClient(urls[i % len(urls)], token=token, timeout_s=60)
               for i in range(contenders)]

    async def cycle(i: int, tally: LockTally) -> bool:
        lock = Lock(clients[i], LOCK_NAME, ttl_ms=TTL_S * 1000)
        began = time.monotonic()
        try:
            await lock.acquire()
        except Exception:  # counted: a lock that cannot be taken is a finding, not a crash
            tally.errors += 1
            await asyncio.sleep(0.1)
            return False
        tally.latencies_s.append(time.monotonic() - began)
        tally.enter()
        tally.leave()  # before the release: the release itself hands the lock on
        await lock.release()
        return True

    try:
        return await _run_point(cycle, contenders, seconds)
    finally:
        for client in clients:
            await client.close()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def etcd_in_process(urls: list[str], contenders: int, seconds: float) -> LockTally:
    clients = [httpx.AsyncClient(base_url=urls[i % len(urls)], timeout=60)
               for i in range(contenders)]

    async def post(i: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = await clients[i].post(path, json=body)
        answer.raise_for_status()
        parsed: dict[str, Any] = answer.json()
        return parsed

    async def cycle(i: int, tally: LockTally) -> bool:
        began = time.monotonic()
        try:
            lease = (await post(i, "/v3/lease/grant", {"TTL": TTL_S}))["ID"]
            key = (await post(i, "/v3/lock/lock", {"name": _b64(LOCK_NAME),
                                                   "lease": lease}))["key"]
        except (httpx.HTTPError, KeyError, ValueError):
            tally.errors += 1
            await asyncio.sleep(0.1)
            return False
        tally.latencies_s.append(time.monotonic() - began)
        tally.enter()
        tally.leave()
        try:
            await post(i, "/v3/lock/unlock", {"key": key})
            await post(i, "/v3/lease/revoke", {"ID": lease})
        except (httpx.HTTPError, ValueError):
            tally.errors += 1
        return True

    try:
        return await _run_point(cycle, contenders, seconds)
    finally:
        for client in clients:
            await client.aclose()


# --------------------------------------------------------------------------- the points


async def lock_points(kraft_urls: list[str], etcd_urls: list[str], *, contenders: list[int],
                      seconds: float, log: Log, kraft_token: str) -> list[dict[str, Any]]:
    """Every lock point; ``kraft_token``: the write token kraft-spark's contenders send."""
    rows: list[dict[str, Any]] = []
    for client in ("cli", "in-process"):
        for n in contenders:
            for system in ("kraft-spark", "etcd"):
                if client == "cli":
                    cycle = kraft_cli(kraft_urls, kraft_token) if system == "kraft-spark" \
                        else etcd_cli(etcd_urls)
                    before = _children_cpu_s()
                    tally = await _run_point(cycle, n, seconds)
                    tally.client_cpu_s = _children_cpu_s() - before
                    tally.checked = False  # a process's holding is not seen from here
                elif system == "kraft-spark":
                    tally = await kraft_in_process(kraft_urls, n, seconds, kraft_token)
                else:
                    tally = await etcd_in_process(etcd_urls, n, seconds)
                rows.append(lock_row(tally, system=system, client=client, contenders=n))
                log(f"  {rows[-1]}")
    return rows
