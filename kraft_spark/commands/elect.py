"""``kraft-spark elect NAME [PROPOSAL]`` and ``elect --listen NAME``, like ``etcdctl elect``.

Campaigning waits until this process leads the election NAME, prints the leader's key and
value (etcdctl prints the key and the proposal) and holds leadership, kept alive by a lease,
until interrupted (Ctrl-C, SIGTERM): then it resigns (its key is deleted and the next candidate
leads). ``--listen`` prints the leader now and each time it changes, without campaigning. The
election is ``kraft_spark.client.concurrency.Election`` on ``AsyncKvClient``: its keys live
under ``NAME/``, ordered by creation, the first one leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from typing import Any

from kraft_spark.commands.kv import endpoint_args, http_errors
from kraft_spark.errors import CommandError


def register(subparsers: Any) -> None:
    elect = subparsers.add_parser(
        "elect", help="campaign in an election and hold leadership, or observe it (like "
        "etcdctl elect)",
        description="Campaigns in the election NAME with PROPOSAL as this candidate's value "
        "and, once leading, prints the key and the value and holds leadership until "
        "interrupted (then resigns). With --listen, prints the leader and each change.")
    endpoint_args(elect)
    elect.add_argument("name", help="the election's name (its keys live under NAME/)")
    elect.add_argument("proposal", nargs="?", default=None,
                       help="this candidate's value, JSON or text (required unless --listen)")
    elect.add_argument("-l", "--listen", action="store_true",
                       help="observe: print the leader now and every change, do not campaign")
    elect.add_argument("--ttl-ms", type=int, default=10_000,
                       help="the TTL of the lease that holds the candidacy (default 10000)")
    elect.set_defaults(func=_elect)


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _elect(args: Any) -> int:
    if args.listen == (args.proposal is not None):
        raise CommandError("give a PROPOSAL to campaign, or --listen to observe (not both)")
    from kraft_spark.client.concurrency import Election
    from kraft_spark.client.kv import AsyncKvClient

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with AsyncKvClient(args.endpoint, token=args.token) as kv:
            election = Election(kv, args.name, ttl_ms=args.ttl_ms)
            if args.listen:
                return await _until(stop, _observe(election))
            campaign = asyncio.ensure_future(election.campaign(_value(args.proposal)))
            try:
                if await _until(stop, campaign) != 0:
                    return 130  # interrupted before leading: the candidacy is withdrawn
                held = campaign.result()
                print(held.key, flush=True)
                print(_show(_value(args.proposal)), flush=True)
                lost = asyncio.ensure_future(held.wait_lost())
                if await _until(stop, lost) == 0:
                    print(f"leadership lost: {lost.result()}", file=sys.stderr, flush=True)
                    return 1
                return 0
            finally:
                await election.resign()

    with http_errors(args.endpoint):
        return asyncio.run(run())


async def _observe(election: Any) -> int:
    async for leader in election.observe():
        if leader is not None:
            print(leader.key, flush=True)
            print(_show(leader.value), flush=True)
    return 0


async def _until(stop: asyncio.Event, work: Any) -> int:
    """0 when ``work`` ended first, 130 when ``stop`` was set first (``work`` cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if task.done():
        task.result()  # its error, if any
        return 0
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return 130
