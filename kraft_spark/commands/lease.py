"""``kraft-spark lease grant|keep-alive|revoke|list`` and ``kraft-spark lock NAME -- COMMAND``
(runs COMMAND while holding the lock, like ``etcdctl lock``; the command sees its key and
fencing token in ``KRAFT_SPARK_LOCK_KEY`` and ``KRAFT_SPARK_LOCK_TOKEN``)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from kraft_spark.client.concurrency import Lock
from kraft_spark.client.kv import AsyncKvClient, KvClient
from kraft_spark.commands.kv import endpoint_args, http_errors
from kraft_spark.errors import CommandError


def register(subparsers: Any) -> None:
    lease = subparsers.add_parser("lease", help="grant, keep alive, revoke and list leases")
    actions = lease.add_subparsers(dest="action", metavar="ACTION", required=True)
    grant = actions.add_parser("grant", help="grant a lease; prints its id")
    endpoint_args(grant)
    grant.add_argument("ttl_ms", type=int, help="time to live in milliseconds")
    grant.set_defaults(func=_grant)
    keep = actions.add_parser("keep-alive", help="keep a lease alive (every TTL/3 until "
                              "interrupted, or once)")
    endpoint_args(keep)
    keep.add_argument("lease_id", type=int)
    keep.add_argument("--once", action="store_true")
    keep.set_defaults(func=_keep_alive)
    revoke = actions.add_parser("revoke", help="revoke a lease: its keys are deleted")
    endpoint_args(revoke)
    revoke.add_argument("lease_id", type=int)
    revoke.set_defaults(func=_revoke)
    listing = actions.add_parser("list", help="the leases in force and their keys")
    endpoint_args(listing)
    listing.set_defaults(func=_list)

    lock = subparsers.add_parser(
        "lock", help="run a command while holding a lock (like etcdctl lock)",
        description="Waits for the lock NAME, runs COMMAND holding it (kept alive by a lease), "
        "releases it when COMMAND exits, and exits with its status. COMMAND gets "
        "KRAFT_SPARK_LOCK_KEY and KRAFT_SPARK_LOCK_TOKEN (the fencing token).")
    endpoint_args(lock)
    lock.add_argument("name")
    lock.add_argument("--ttl-ms", type=int, default=10_000)
    lock.add_argument("argv", nargs="+", metavar="command", help="the command (after --)")
    lock.set_defaults(func=_lock)


def _call(args: Any, work: Any) -> int:
    with http_errors(args.endpoint), KvClient(args.endpoint, token=args.token) as client:
        result: int = work(client)
        return result


def _grant(args: Any) -> int:
    def work(client: KvClient) -> int:
        lease = client.grant_lease(args.ttl_ms)
        print(f"lease {lease.lease_id} granted with TTL {lease.ttl_ms} ms")
        return 0
    return _call(args, work)


def _keep_alive(args: Any) -> int:
    def work(client: KvClient) -> int:
        while True:
            lease = client.keep_alive(args.lease_id)
            print(f"lease {lease.lease_id} kept alive with TTL {lease.ttl_ms} ms", flush=True)
            if args.once:
                return 0
            time.sleep(lease.ttl_ms / 3000)
    return _call(args, work)


def _revoke(args: Any) -> int:
    def work(client: KvClient) -> int:
        client.revoke_lease(args.lease_id)
        print(f"lease {args.lease_id} revoked")
        return 0
    return _call(args, work)


def _list(args: Any) -> int:
    def work(client: KvClient) -> int:
        for lease in client.leases():
            print(json.dumps({"lease_id": lease.lease_id, "ttl_ms": lease.ttl_ms,
                              "keys": list(lease.keys)}))
        return 0
    return _call(args, work)


def _lock(args: Any) -> int:
    # argparse drops the first "--" itself; one left here was given twice
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        raise CommandError("give the command to run after --, e.g. kraft-spark lock jobs -- "
                           "./compact.sh")

    async def run() -> int:
        async with AsyncKvClient(args.endpoint, token=args.token) as kv, \
                Lock(kv, args.name, ttl_ms=args.ttl_ms) as held:
            print(f"locked {held.key} (token {held.token})", file=sys.stderr, flush=True)
            env = {**os.environ, "KRAFT_SPARK_LOCK_KEY": held.key,
                   "KRAFT_SPARK_LOCK_TOKEN": str(held.token)}
            proc = await asyncio.create_subprocess_exec(*command, env=env)
            lost = asyncio.ensure_future(held.lost.wait())
            done = asyncio.ensure_future(proc.wait())
            await asyncio.wait({lost, done}, return_when=asyncio.FIRST_COMPLETED)
            if lost.done() and not done.done():
                print(f"kraft-spark lock: the lease of {held.key} expired: the lock is no "
                      "longer held (the command keeps running; its fencing token is stale)",
                      file=sys.stderr, flush=True)
            code = await done
            lost.cancel()
            return code

    with http_errors(args.endpoint):
        return asyncio.run(run())
