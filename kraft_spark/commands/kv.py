"""``kraft-spark kv get|put|del|txn|watch``: the store from the command line, with etcdctl's
habits and flag names (``--prefix``, ``--from-key``, ``--keys-only``, ``--print-value-only``,
``--lease``, ``-w json``), over a node's HTTP API.

Values are JSON: ``put k '{"n": 1}'`` stores the object, ``put k hello`` (not JSON) stores the
string ``"hello"``. ``put k null`` is refused: in the store API a null value deletes the key
(``POST /v1/records``), so no key holds JSON null, and a deletion is spelt ``kv del``. A failed
condition exits 1 and names the keys with their current revision.

``get``, ``put``, ``del`` and ``txn`` send their requests with ``store_http`` (the standard
library: no httpx import at start-up); ``watch`` streams with ``KvClient``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kraft_spark.client.endpoints import key_path
from kraft_spark.client.errors import ConditionFailedError, KvError
from kraft_spark.commands.http_token import token_args
from kraft_spark.commands.store_http import StoreHttp, Unreachable, checked
from kraft_spark.commands.warehouse_flag import warehouse_arg
from kraft_spark.errors import CommandError

if TYPE_CHECKING:
    from kraft_spark.client.kv import KvClient

DEFAULT_URL = "http://127.0.0.1:8080"
# The store API's cap on the conditions of one write (api.conditional.MAX_CONDITIONS): a
# prefix delete guards each key it deletes, so it deletes at most this many keys per write.
DELETE_BATCH = 128
# A prefix delete whose keys keep changing under it gives up after this many reads.
DELETE_ATTEMPTS = 5


def register(subparsers: Any) -> None:
    kv = subparsers.add_parser(
        "kv", help="read, write, compare-and-set and watch keys (like etcdctl)",
        description="The store API over HTTP: reads by key (linearizable by default), "
        "conditional writes, watches.")
    actions = kv.add_subparsers(dest="action", metavar="ACTION", required=True)

    get = actions.add_parser("get", help="a key's value (or the keys of a prefix or from a "
                             "key on)")
    _common(get)
    get.add_argument("key", help="the key (with --prefix: the prefix; with --from-key: the "
                     "first key)")
    which = get.add_mutually_exclusive_group()
    which.add_argument("--prefix", action="store_true", help="every key starting with KEY")
    which.add_argument("--from-key", action="store_true",
                       help="every key greater than or equal to KEY (byte order)")
    get.add_argument("--limit", type=int, default=0, help="at most this many keys (0: all)")
    get.add_argument("--rev", type=int, default=0, metavar="N",
                     help="the keys as they were at revision N (the state right after the write "
                     "at offset N; 0: now); a node keeps the last kraft.etcd.history.revisions")
    what = get.add_mutually_exclusive_group()
    what.add_argument("--print-value-only", action="store_true",
                      help="print the values only (not the keys)")
    what.add_argument("--keys-only", action="store_true", help="print the keys only")
    what.add_argument("--count-only", action="store_true",
                      help="print how many keys there are, nothing else")
    get.add_argument("--consistency", choices=("l", "s"), default="l",
                     help="l: linearizable (default), s: serializable (this node's state)")
    get.set_defaults(func=_get)

    put = actions.add_parser("put", help="write a key (optionally only if a condition holds)")
    _common(put)
    put.add_argument("key", help="the key")
    put.add_argument("value", help="JSON (anything else is stored as a JSON string; null is "
                     "refused: delete with kv del)")
    _conditions(put)
    put.add_argument("--if-absent", action="store_true", help="only if KEY does not exist")
    put.add_argument("--lease", type=int, default=None, metavar="ID",
                     help="attach the key to this lease (kraft-spark lease grant): it is "
                     "deleted when the lease expires or is revoked")
    put.set_defaults(func=_put)

    delete = actions.add_parser(
        "del", aliases=["delete"], help="delete a key, or every key of a prefix (prints the "
        "count), optionally only if a condition holds")
    _common(delete)
    delete.add_argument("key", help="the key (with --prefix: the prefix)")
    delete.add_argument("--prefix", action="store_true",
                        help="every key starting with KEY; prints how many were deleted")
    _conditions(delete)
    delete.set_defaults(func=_delete)

    txn = actions.add_parser(
        "txn", help='a transaction from stdin: {"conditions": [...], "records": [...]}',
        description='Reads one JSON object from stdin, e.g. {"conditions": [{"key": "a", '
        '"version": 3}], "records": [{"key": "a", "value": 4}, {"key": "b", "value": null}]}: '
        "every record is written if every condition holds, else none (value null deletes).")
    _common(txn)
    txn.set_defaults(func=_txn)

    watch = actions.add_parser("watch", help="print every write to a key or prefix as it "
                               "commits")
    _common(watch)
    watch.add_argument("key", help="the key (with --prefix: the prefix)")
    watch.add_argument("--prefix", action="store_true", help="every key starting with KEY")
    watch.add_argument("--from-offset", type=int, default=None,
                       help="replay history from this offset first (default: from now)")
    watch.add_argument("--after", default=None, metavar="ID",
                       help="resume right after the event of this id (an id -w json printed: "
                       "N, or N.M between the events of one offset); wins over --from-offset")
    watch.add_argument("--progress", action="store_true", help="print progress events too")
    watch.add_argument("--prev-kv", action="store_true",
                       help="also print each key's previous value (a PREV line with its "
                       "offset; -w json: \"prev\"), when it had one")
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


def _transport_errors() -> tuple[type[Exception], ...]:
    """What an unreachable endpoint raises: ``store_http``'s, and httpx's when the command
    loaded it (watch, lock, elect; looked up, not imported: the short commands do without)."""
    httpx = sys.modules.get("httpx")
    return (Unreachable,) if httpx is None else (Unreachable, httpx.HTTPError)


@contextlib.contextmanager
def http_errors(endpoint: str) -> Iterator[None]:
    """An error answer or an unreachable endpoint as the command's one-line error (exit 1)."""
    try:
        yield
    except KvError as exc:
        raise CommandError(f"{endpoint}: {exc}", 1) from None
    except _transport_errors() as exc:
        raise CommandError(f"cannot reach {endpoint} ({exc}): is the quorum's HTTP API there? "
                           "pass --endpoint URL", 1) from None


def _common(parser: Any) -> None:
    endpoint_args(parser)
    parser.add_argument("-w", "--write-out", choices=("simple", "json"), default="simple",
                        help="simple (default): etcdctl's lines; json: one JSON object per "
                        "line")


def _conditions(parser: Any) -> None:
    parser.add_argument("--if-version", type=int, default=None, metavar="N",
                        help="only if KEY's version is N (0: absent)")
    parser.add_argument("--if-mod-offset", type=int, default=None, metavar="N",
                        help="only if KEY's last write is at offset N")


def _value_arg(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if value is None:
        raise CommandError("null deletes a key in the store API, so no key holds it: delete "
                           "with kraft-spark kv del KEY (or put the string '\"null\"')")
    return value


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _run(args: Any, work: Callable[[StoreHttp], int]) -> int:
    with http_errors(args.endpoint):
        try:
            return work(StoreHttp(args.endpoint, token=args.token))
        except ConditionFailedError as exc:  # before http_errors: it is a KvError too
            failed = ", ".join(
                f"{f['key']} (mod_offset {f['mod_offset']}, version {f['version']})"
                for f in exc.failed)
            if args.write_out == "json":
                print(json.dumps(exc.body))
            raise CommandError(f"conditions failed, nothing written: {failed}", 1) from None


_KV_FIELDS = ("key", "value", "create_offset", "mod_offset", "version", "offset")


def _print_kv(args: Any, item: dict[str, Any]) -> None:
    if args.write_out == "json":
        print(json.dumps({name: item[name] for name in _KV_FIELDS if name in item}))
    elif args.print_value_only:
        print(_show(item["value"]))
    elif args.keys_only:  # etcdctl's shape: the key, then an empty line
        print(item["key"])
        print()
    else:
        print(item["key"])
        print(_show(item["value"]))


def _range(http: StoreHttp, prefix: str, consistency: str, page: int = 1000
           ) -> Iterator[dict[str, Any]]:
    """Every key under ``prefix`` in key order (``GET /v1/kv``, a page at a time)."""
    token: str | None = None
    while True:
        query: dict[str, Any] = {"prefix": prefix, "limit": page, "consistency": consistency}
        if token:
            query["page_token"] = token
        body = http.checked("GET", "/v1/kv", retry=True, query=query)
        yield from body["kvs"]
        token = body.get("next_page_token")
        if not token:
            return


def range_at(http: StoreHttp, key: str, *, prefix: bool, from_key: bool, revision: int,
             consistency: str) -> Iterator[dict[str, Any]]:
    """The keys of the range at ``revision`` (0: now) in key order (``GET /v1/range``, a page
    at a time, every page at the revision the first one read)."""
    query: dict[str, Any] = {"key": key, "prefix": str(prefix).lower(),
                             "from_key": str(from_key).lower(), "revision": revision,
                             "limit": 1000, "consistency": consistency}
    while True:
        body = http.checked("GET", "/v1/range", retry=True, query=query)
        yield from body["kvs"]
        if not body["more"] or not body["kvs"]:
            return
        query.update(after=body["kvs"][-1]["key"], revision=body["revision"])


def _selected(args: Any, http: StoreHttp, consistency: str) -> Iterator[dict[str, Any]]:
    """The keys ``get`` names, in key order."""
    if args.rev or args.from_key:
        yield from range_at(http, args.key, prefix=args.prefix, from_key=args.from_key,
                            revision=args.rev, consistency=consistency)
    elif args.prefix:
        yield from _range(http, args.key, consistency)
    else:
        status, body = http.call("GET", key_path(args.key), retry=True,
                                 query={"consistency": consistency})
        if status != 404:
            yield checked(status, body)


def _get(args: Any) -> int:
    consistency = "linearizable" if args.consistency == "l" else "serializable"

    def work(http: StoreHttp) -> int:
        count = 0
        for item in _selected(args, http, consistency):
            count += 1
            if not args.count_only:
                _print_kv(args, item)
            if args.limit and count >= args.limit:
                break
        if args.count_only:
            print(json.dumps({"count": count}) if args.write_out == "json" else count)
        return 0

    return _run(args, work)


def _conditions_of(key: str, if_version: int | None, if_mod_offset: int | None,
                   if_absent: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if if_version is not None:
        out.append({"key": key, "version": if_version})
    if if_mod_offset is not None:
        out.append({"key": key, "mod_offset": if_mod_offset})
    if if_absent:
        out.append({"key": key, "exists": False})
    return out


def _write(http: StoreHttp, records: list[dict[str, Any]], conditions: list[dict[str, Any]],
           lease_id: int | None = None) -> dict[str, Any]:
    """``POST /v1/records``: sent once (a write without an Idempotency-Key is not repeated)."""
    body: dict[str, Any] = {"records": records}
    if conditions:
        body["conditions"] = conditions
    if lease_id is not None:
        body["lease_id"] = lease_id
    return http.checked("POST", "/v1/records", retry=False, body=body)


def _print_write(args: Any, result: dict[str, Any]) -> int:
    if args.write_out == "json":
        print(json.dumps({name: result[name] for name in ("base_offset", "last_offset",
                                                            "epoch")}))
    else:
        print(f"OK (offset {result['base_offset']}, epoch {result['epoch']})")
    return 0


def _put(args: Any) -> int:
    value = _value_arg(args.value)
    return _run(args, lambda http: _print_write(args, _write(
        http, [{"key": args.key, "value": value}],
        _conditions_of(args.key, args.if_version, args.if_mod_offset, args.if_absent),
        args.lease)))


def _delete(args: Any) -> int:
    if not args.prefix:
        return _run(args, lambda http: _print_write(args, _write(
            http, [{"key": args.key, "value": None}],
            _conditions_of(args.key, args.if_version, args.if_mod_offset))))
    if args.if_version is not None or args.if_mod_offset is not None:
        raise CommandError("--prefix takes no --if-version/--if-mod-offset (they name one key)")
    return _run(args, lambda http: _print_deleted(args, _delete_prefix(http, args.key)))


def _delete_prefix(http: StoreHttp, prefix: str) -> int:
    """Delete the keys under ``prefix``: how many. Each write deletes up to DELETE_BATCH keys
    the read found, each guarded by its ``mod_offset`` (a key written since is kept, the batch
    read again); a key created under the prefix after the last read is not deleted (etcd's
    DeleteRange is one step: the HTTP API has no range condition)."""
    deleted = 0
    for _ in range(DELETE_ATTEMPTS):
        found = [(kv["key"], kv["mod_offset"]) for kv in _range(http, prefix, "linearizable")]
        if not found:
            return deleted
        raced = False
        for start in range(0, len(found), DELETE_BATCH):
            batch = found[start:start + DELETE_BATCH]
            try:
                _write(http, [{"key": k, "value": None} for k, _ in batch],
                       [{"key": k, "mod_offset": m} for k, m in batch])
            except ConditionFailedError:
                raced = True  # someone wrote one of them: read again
                continue
            deleted += len(batch)
        if not raced:
            return deleted
    raise CommandError(f"the keys under {prefix!r} kept changing: {deleted} deleted, some "
                       f"left after {DELETE_ATTEMPTS} attempts; run it again", 1)


def _print_deleted(args: Any, count: int) -> int:
    print(json.dumps({"deleted": count}) if args.write_out == "json" else count)
    return 0


def _txn(args: Any) -> int:
    try:
        body = json.load(sys.stdin)
        records = [{"key": r["key"], "value": r["value"]} for r in body["records"]]
        conditions = list(body.get("conditions") or [])
    except (ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"stdin is not a transaction ({exc}): send "
                           '{"conditions": [...], "records": [{"key": ..., "value": ...}]}') \
            from None
    return _run(args, lambda http: _print_write(args, _write(http, records, conditions)))


class _PreviousValues:
    """``--prev-kv``: each event's key before it. A key's first event asks ``GET /v1/range`` at
    the revision just below it; later ones follow from the events seen (a put leaves its value,
    a delete nothing). None where the history no longer holds it (etcd omits it then too)."""

    def __init__(self, http: StoreHttp) -> None:
        self._http = http
        self._known: dict[str, dict[str, Any] | None] = {}

    def before(self, key: str, offset: int) -> dict[str, Any] | None:
        if key not in self._known and offset <= 1:
            # Revision 0 asks for the current state; and nothing precedes offset 1 but the
            # first epoch's leader record at offset 0 (no key written there).
            self._known[key] = None
        if key not in self._known:
            try:
                found = list(range_at(self._http, key, prefix=False, from_key=False,
                                      revision=offset - 1, consistency="linearizable"))
            except KvError as exc:
                if exc.status != 410:
                    raise
                found = []
            self._known[key] = found[0] if found else None
        return self._known[key]

    def saw(self, key: str, offset: int, value: Any, kind: str) -> None:
        self._known[key] = {"key": key, "value": value, "mod_offset": offset} \
            if kind == "put" else None


def _watch(args: Any) -> int:
    from kraft_spark.client.kv import KvClient

    previous = _PreviousValues(StoreHttp(args.endpoint, token=args.token)) \
        if args.prev_kv else None

    def work(client: KvClient) -> int:
        stream = client.watch(key=None if args.prefix else args.key,
                              prefix=args.key if args.prefix else None,
                              from_offset=args.from_offset, after=args.after)
        for event in stream:
            if event.type == "progress" and not args.progress:
                continue
            prev = None
            if previous is not None and event.key is not None and event.type in ("put",
                                                                                 "delete"):
                prev = previous.before(event.key, event.offset)
                previous.saw(event.key, event.offset, event.value, event.type)
            if args.write_out == "json":
                shown = {"type": event.type, "offset": event.offset, "id": event.id,
                         "key": event.key, "value": event.value}
                if previous is not None and event.type in ("put", "delete"):
                    shown["prev"] = None if prev is None else {
                        "value": prev["value"], "mod_offset": prev["mod_offset"]}
                print(json.dumps(shown), flush=True)
            elif event.type in ("put", "delete"):
                print(f"{event.type.upper()} {event.offset} {event.key}", flush=True)
                if event.type == "put":
                    print(_show(event.value), flush=True)
                if prev is not None:
                    print(f"PREV {prev['mod_offset']}", flush=True)
                    print(_show(prev["value"]), flush=True)
            else:
                print(f"{event.type.upper()} {event.offset}"
                      + (f" {event.value}" if event.value else ""), flush=True)
            if event.type == "cancelled":
                return 1
        return 0

    with http_errors(args.endpoint), KvClient(args.endpoint, token=args.token) as client:
        return work(client)
