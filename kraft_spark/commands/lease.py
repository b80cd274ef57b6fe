"""``kraft-spark lease grant|keep-alive|timetolive|revoke|list``, like etcdctl's; ``lock`` is
``kraft_spark.commands.lock``.

They send their requests with ``store_http`` (no httpx import at start-up)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kraft_spark.commands.kv import endpoint_args, http_errors
from kraft_spark.commands.store_http import StoreHttp, checked


def register(subparsers: Any) -> None:
    lease = subparsers.add_parser(
        "lease", help="grant, keep alive, inspect (timetolive), revoke and list leases")
    actions = lease.add_subparsers(dest="action", metavar="ACTION", required=True)
    grant = actions.add_parser("grant", help="grant a lease; prints its id")
    endpoint_args(grant)
    grant.add_argument("ttl_ms", type=int, help="time to live in milliseconds")
    grant.set_defaults(func=_grant)
    keep = actions.add_parser("keep-alive", help="keep a lease alive (every TTL/3 until "
                              "interrupted, or once)")
    endpoint_args(keep)
    keep.add_argument("lease_id", type=int, metavar="ID", help="the lease's id")
    keep.add_argument("--once", action="store_true",
                      help="one keep-alive, then exit (default: every TTL/3 until interrupted)")
    keep.set_defaults(func=_keep_alive)
    ttl = actions.add_parser("timetolive", help="a lease's TTL and, with --keys, its keys "
                             "(like etcdctl lease timetolive)")
    endpoint_args(ttl)
    ttl.add_argument("lease_id", type=int, metavar="ID", help="the lease's id")
    ttl.add_argument("--keys", action="store_true", help="also list the keys attached to it")
    ttl.add_argument("-w", "--write-out", choices=("simple", "json"), default="simple",
                     help="simple (default): etcdctl's line; json: one JSON object")
    ttl.set_defaults(func=_time_to_live)
    revoke = actions.add_parser("revoke", help="revoke a lease: its keys are deleted")
    endpoint_args(revoke)
    revoke.add_argument("lease_id", type=int, metavar="ID", help="the lease's id")
    revoke.set_defaults(func=_revoke)
    listing = actions.add_parser("list", help="the leases in force and their keys")
    endpoint_args(listing)
    listing.set_defaults(func=_list)


def _call(args: Any, work: Callable[[StoreHttp], int]) -> int:
    with http_errors(args.endpoint):
        return work(StoreHttp(args.endpoint, token=args.token))


def _grant(args: Any) -> int:
    def work(http: StoreHttp) -> int:
        lease = http.checked("POST", "/v1/leases", retry=False, body={"ttl_ms": args.ttl_ms})
        print(f"lease {lease['lease_id']} granted with TTL {lease['ttl_ms']} ms")
        return 0
    return _call(args, work)


def _keep_alive(args: Any) -> int:
    def work(http: StoreHttp) -> int:
        while True:
            lease = http.checked("POST", f"/v1/leases/{args.lease_id}/keepalive", retry=True)
            print(f"lease {lease['lease_id']} kept alive with TTL {lease['ttl_ms']} ms",
                  flush=True)
            if args.once:
                return 0
            time.sleep(lease["ttl_ms"] / 3000)
    return _call(args, work)


def _time_to_live(args: Any) -> int:
    """The lease as ``GET /v1/leases/{id}`` answers it: its TTL, the time left on the leader's
    countdown (``kraft_spark.store.lease_clock``: the node that answers asks the leader) and
    its keys; etcdctl's ``already expired`` once it is gone (404)."""
    def work(http: StoreHttp) -> int:
        status, lease = http.call("GET", f"/v1/leases/{args.lease_id}", retry=True)
        if status == 404:
            if args.write_out == "json":
                print(json.dumps({"lease_id": args.lease_id, "ttl_ms": -1}))
            else:  # etcdctl's words for a lease that is gone
                print(f"lease {args.lease_id} already expired")
            return 0
        lease = checked(status, lease)
        if args.write_out == "json":
            shown = {key: lease[key] for key in ("lease_id", "ttl_ms", "remaining_ms")}
            if args.keys:
                shown["keys"] = lease["keys"]
            print(json.dumps(shown))
            return 0
        line = (f"lease {lease['lease_id']} granted with TTL {lease['ttl_ms']} ms, remaining "
                f"{lease['remaining_ms']} ms")
        if args.keys:
            line += f", attached keys({lease['keys']})"
        print(line)
        return 0
    return _call(args, work)


def _revoke(args: Any) -> int:
    def work(http: StoreHttp) -> int:
        http.checked("DELETE", f"/v1/leases/{args.lease_id}", retry=True)
        print(f"lease {args.lease_id} revoked")
        return 0
    return _call(args, work)


def _list(args: Any) -> int:
    def work(http: StoreHttp) -> int:
        for lease in http.checked("GET", "/v1/leases", retry=True)["leases"]:
            print(json.dumps({"lease_id": lease["lease_id"], "ttl_ms": lease["ttl_ms"],
                              "keys": list(lease["keys"])}))
        return 0
    return _call(args, work)
