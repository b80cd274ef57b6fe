"""``kraft-spark kv get|put|delete|txn|watch``: the store from the command line, with etcdctl's
habits (``--prefix``, ``--print-value-only``, ``-w json``), over a node's HTTP API.

Values are JSON: ``put k '{"n": 1}'`` stores the object, ``put k hello`` (not JSON) stores the
string ``"hello"``. A failed condition exits 1 and names the keys with their current revision.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import httpx

from kraft_spark.app_endpoint import warehouse_arg
from kraft_spark.client.kv import (
    ConditionFailedError,
    Consistency,
    KeyValue,
    KvClient,
    KvError,
    WriteResult,
)
from kraft_spark.commands.http_token import token_args
from kraft_spark.errors import CommandError

DEFAULT_URL = "http://127.0.0.1:8080"


def register(subparsers: Any) -> None:
    kv = subparsers.add_parser(
        "kv", help="read, write, compare-and-set and watch keys (like etcdctl)",
        description="The store API over HTTP: reads by key (linearizable by default), "
        "conditional writes, watches.")
    actions = kv.add_subparsers(dest="action", metavar="ACTION", required=True)

    get = actions.add_parser("get", help="a key's value (or every key under a prefix)")
    _common(get)
    get.add_argument("key")
    get.add_argument("--prefix", action="store_true", help="every key starting with KEY")
    get.add_argument("--limit", type=int, default=0, help="at most this many keys (0: all)")
    get.add_argument("--print-value-only", action="store_true")
    get.add_argument("--consistency", choices=("l", "s"), default="l",
                     help="l: linearizable (default), s: serializable (this node's state)")
    get.set_defaults(func=_get)

    put = actions.add_parser("put", help="write a key (optionally only if a condition holds)")
    _common(put)
    put.add_argument("key")
    put.add_argument("value", help="JSON (anything else is stored as a JSON string)")
    _conditions(put)
    put.add_argument("--if-absent", action="store_true", help="only if KEY does not exist")
    put.set_defaults(func=_put)

    delete = actions.add_parser("delete", help="delete a key (optionally only if ...)")
    _common(delete)
    delete.add_argument("key")
    _conditions(delete)
    delete.set_defaults(func=_delete)

    txn = actions.add_parser(
        "txn", help='a transaction from stdin: {"conditions": [...], "records": [...]}',
        description='Reads one JSON object from stdin, e.g. {"conditions": [{"key": "a", '
        '"version": 3}], "records": [{"key": "a", "value": 4}, {"key": "b", "value": null}]}: '
        "every record is written if every condition holds, else none.")
    _common(txn)
    txn.set_defaults(func=_txn)

    watch = actions.add_parser("watch", help="print every write to a key or prefix as it "
                               "commits")
    _common(watch)
    watch.add_argument("key")
    watch.add_argument("--prefix", action="store_true")
    watch.add_argument("--from-offset", type=int, default=None,
                       help="replay history from this offset first (default: from now)")
    watch.add_argument("--after", default=None, metavar="ID",
                       help="resume right after the event of this id (an id -w json printed: "
                       "N, or N.M between the events of one offset); wins over --from-offset")
    watch.add_argument("--progress", action="store_true", help="print progress events too")
    watch.set_defaults(func=_watch)


def endpoint_args(parser: Any) -> None:
    """``--endpoint`` and the token's flags, as every store command (kv, lease, lock) takes
    them."""
    parser.add_argument("--endpoint", default=os.environ.get("KRAFT_SPARK_HTTP", DEFAULT_URL),
                        help="a node's HTTP API or the application's, or several nodes' "
                        "comma-separated (tried in turn when one fails; default "
                        f"$KRAFT_SPARK_HTTP or {DEFAULT_URL})")
    token_args(parser)
    warehouse_arg(parser, "--endpoint")


@contextlib.contextmanager
def http_errors(endpoint: str) -> Iterator[None]:
    """An error answer or an unreachable endpoint as the command's one-line error (exit 1)."""
    try:
        yield
    except KvError as exc:
        raise CommandError(f"{endpoint}: {exc}", 1) from None
    except httpx.HTTPError as exc:
        raise CommandError(f"cannot reach {endpoint} ({exc}): is the quorum's HTTP API there? "
                           "pass --endpoint URL", 1) from None


def _common(parser: Any) -> None:
    endpoint_args(parser)
    parser.add_argument("-w", "--write-out", choices=("simple", "json"), default="simple")


def _conditions(parser: Any) -> None:
    parser.add_argument("--if-version", type=int, default=None,
                        help="only if KEY's version is N (0: absent)")
    parser.add_argument("--if-mod-offset", type=int, default=None,
                        help="only if KEY's last write is at offset N")


def _client(args: Any) -> KvClient:
    return KvClient(args.endpoint, token=args.token)


def _value_arg(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _run(args: Any, work: Any) -> int:
    with http_errors(args.endpoint):
        try:
            with _client(args) as client:
                result: int = work(client)
                return result
        except ConditionFailedError as exc:  # before http_errors: it is a KvError too
            failed = ", ".join(
                f"{f['key']} (mod_offset {f['mod_offset']}, version {f['version']})"
                for f in exc.failed)
            if args.write_out == "json":
                print(json.dumps(exc.body))
            raise CommandError(f"conditions failed, nothing written: {failed}", 1) from None


def _print_kv(args: Any, item: KeyValue) -> None:
    if args.write_out == "json":
        print(json.dumps({"key": item.key, "value": item.value,
                          "create_offset": item.create_offset, "mod_offset": item.mod_offset,
                          "version": item.version, "offset": item.offset}))
    elif args.print_value_only:
        print(_show(item.value))
    else:
        print(item.key)
        print(_show(item.value))


def _get(args: Any) -> int:
    consistency: Consistency = "linearizable" if args.consistency == "l" else "serializable"

    def work(client: KvClient) -> int:
        if not args.prefix:
            item = client.get(args.key, consistency=consistency)
            if item is not None:
                _print_kv(args, item)
            return 0
        for count, item in enumerate(client.range(args.key, consistency=consistency), 1):
            _print_kv(args, item)
            if args.limit and count >= args.limit:
                break
        return 0

    return _run(args, work)


def _print_write(args: Any, result: WriteResult) -> int:
    if args.write_out == "json":
        print(json.dumps({"base_offset": result.base_offset, "last_offset": result.last_offset,
                          "epoch": result.epoch}))
    else:
        print(f"OK (offset {result.base_offset}, epoch {result.epoch})")
    return 0


def _put(args: Any) -> int:
    return _run(args, lambda c: _print_write(args, c.put(
        args.key, _value_arg(args.value), if_version=args.if_version,
        if_mod_offset=args.if_mod_offset, if_absent=args.if_absent)))


def _delete(args: Any) -> int:
    return _run(args, lambda c: _print_write(args, c.delete(
        args.key, if_version=args.if_version, if_mod_offset=args.if_mod_offset)))


def _txn(args: Any) -> int:
    try:
        body = json.load(sys.stdin)
        records = [(r["key"], r["value"]) for r in body["records"]]
        conditions = list(body.get("conditions") or [])
    except (ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"stdin is not a transaction ({exc}): send "
                           '{"conditions": [...], "records": [{"key": ..., "value": ...}]}') \
            from None
    return _run(args, lambda c: _print_write(args, c.txn(records, conditions)))


def _watch(args: Any) -> int:
    def work(client: KvClient) -> int:
        stream = client.watch(key=None if args.prefix else args.key,
                              prefix=args.key if args.prefix else None,
                              from_offset=args.from_offset, after=args.after)
        for event in stream:
            if event.type == "progress" and not args.progress:
                continue
            if args.write_out == "json":
                print(json.dumps({"type": event.type, "offset": event.offset, "id": event.id,
                                  "key": event.key, "value": event.value}), flush=True)
            elif event.type in ("put", "delete"):
                print(f"{event.type.upper()} {event.offset} {event.key}", flush=True)
                if event.type == "put":
                    print(_show(event.value), flush=True)
            else:
                print(f"{event.type.upper()} {event.offset}"
                      + (f" {event.value}" if event.value else ""), flush=True)
            if event.type == "cancelled":
                return 1
        return 0

    return _run(args, work)
