"""``kraft-spark lock NAME -- COMMAND``: runs COMMAND while holding the lock, like ``etcdctl
lock``; the command sees its key and fencing token in ``KRAFT_SPARK_LOCK_KEY`` and
``KRAFT_SPARK_LOCK_TOKEN``; what happens to it when the lock is lost:
``kraft_spark.commands.lock_child``. The lock is ``kraft_spark.client.concurrency.Lock`` on
``AsyncKvClient``, imported when the command runs (not for ``--help``)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from kraft_spark.commands.kv import endpoint_args, http_errors
from kraft_spark.commands.lock_child import ON_LOST, signal_arg
from kraft_spark.errors import CommandError


def register(subparsers: Any) -> None:
    lock = subparsers.add_parser(
        "lock", help="run a command while holding a lock (like etcdctl lock)",
        description="Waits for the lock NAME, runs COMMAND holding it (kept alive by a lease), "
        "releases it when COMMAND exits, and exits with its status. COMMAND gets "
        "KRAFT_SPARK_LOCK_KEY and KRAFT_SPARK_LOCK_TOKEN (the fencing token). The lock is lost "
        "when no keep-alive was acknowledged for the TTL (by this process's clock) or the "
        "quorum expired it: then, by default, COMMAND's process group gets SIGTERM and, "
        "after --grace-s, SIGKILL (see --on-lost), and the exit status is COMMAND's, or 1 "
        "if that was 0. Give several comma-separated endpoints to keep the lease alive "
        "through any of them.")
    endpoint_args(lock)
    lock.add_argument("name", help="the lock's name (its keys live under it)")
    lock.add_argument("--ttl-ms", type=int, default=10_000,
                      help="the TTL of the lease that holds the lock (default 10000)")
    lock.add_argument("--on-lost", choices=ON_LOST, default="stop",
                      help="when the lock is lost while COMMAND runs: stop it (--signal to its "
                      "process group, SIGKILL after --grace-s; the default), signal it once "
                      "and let it run, or keep it running (its fencing token is stale)")
    lock.add_argument("--signal", default="TERM", type=signal_arg, metavar="SIG",
                      help="the signal of --on-lost stop|signal (default TERM)")
    lock.add_argument("--grace-s", type=float, default=10.0,
                      help="--on-lost stop: seconds between the signal and SIGKILL (default 10)")
    lock.add_argument("argv", nargs="+", metavar="command", help="the command (after --)")
    lock.set_defaults(func=_lock)


def _lock(args: Any) -> int:
    # argparse drops the first "--" itself; one left here was given twice
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        raise CommandError("give the command to run after --, e.g. kraft-spark lock jobs -- "
                           "./compact.sh")

    from kraft_spark.client.concurrency import Lock
    from kraft_spark.client.kv import AsyncKvClient
    from kraft_spark.commands.lock_child import LockedCommand

    async def run() -> int:
        async with AsyncKvClient(args.endpoint, token=args.token) as kv, \
                Lock(kv, args.name, ttl_ms=args.ttl_ms) as held:
            print(f"locked {held.key} (token {held.token})", file=sys.stderr, flush=True)
            env = {**os.environ, "KRAFT_SPARK_LOCK_KEY": held.key,
                   "KRAFT_SPARK_LOCK_TOKEN": str(held.token)}
            child = LockedCommand(command, env, on_lost=args.on_lost, signum=args.signal,
                                  grace_s=args.grace_s)
            return await child.run(held)

    with http_errors(args.endpoint):
        return asyncio.run(run())
