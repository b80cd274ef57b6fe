"""Client commands: ``append``, ``read``, ``metadata-quorum`` (like kafka-metadata-quorum.sh).

Each finds the leader by itself from any node given in ``--bootstrap-controller``, retries while
an election is in progress, and ends with one line on stderr and a non-zero exit code when the
quorum stays unreachable.

Values: ``--value V`` is stored as the UTF-8 text V. In a ``--file`` of JSON lines, a string
value is stored as its text, any other JSON value as its compact JSON text, and ``null`` is a
tombstone (it deletes the key in the ``snapshot`` table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from kraft_spark import aio
from kraft_spark.errors import CommandError

FILE_BATCH = 500  # records per append when reading --file


def register(subparsers: Any) -> None:
    append = subparsers.add_parser("append", help="append records and wait until committed")
    _bootstrap(append)
    append.add_argument("--key", help="the record's key")
    append.add_argument("--value", help="the record's value (text; omit with --tombstone)")
    append.add_argument("--tombstone", action="store_true", help="append a null value")
    append.add_argument("--file", help="JSON lines: {\"key\": ..., \"value\": ..., "
                        "\"headers\": {...}}")
    append.add_argument("--json", action="store_true", help="print JSON lines")
    append.set_defaults(func=_append)

    read = subparsers.add_parser("read", help="print committed data records")
    _bootstrap(read)
    read.add_argument("--from-offset", type=int, default=0)
    read.add_argument("--limit", type=int, default=None, help="at most this many records")
    read.add_argument("--json", action="store_true", help="print JSON lines")
    read.set_defaults(func=_read)

    quorum = subparsers.add_parser(
        "metadata-quorum", help="describe the quorum (like kafka-metadata-quorum.sh)"
    )
    _bootstrap(quorum)
    actions = quorum.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = actions.add_parser("describe", help="status or replication of the quorum")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true")
    what.add_argument("--replication", action="store_true")
    describe.add_argument("--human-readable", action="store_true",
                          help="timestamps as 'N ms ago'")
    describe.add_argument("--json", action="store_true", help="print JSON")
    describe.set_defaults(func=_describe)


def _bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT[,...]",
                        help="any node(s) of the quorum")
    parser.add_argument("--timeout", type=float, default=15.0,
                        help="seconds to keep retrying while no leader answers (default 15)")


def _run(args: argparse.Namespace, make: Any) -> Any:
    """Run ``make(client)`` with a client, mapping client errors to one-line command errors."""
    from kraft_spark.client import AsyncQuorumClient, ClientError

    async def main() -> Any:
        try:
            client = AsyncQuorumClient(args.bootstrap_controller, retry_budget_s=args.timeout,
                                       request_timeout_s=min(5.0, args.timeout))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        try:
            return await make(client)
        finally:
            await client.close()

    try:
        return aio.run(main())
    except ClientError as exc:
        raise CommandError(str(exc), exit_code=1) from exc


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


# ------------------------------------------------------------------------------ append


def _records_from_file(path: str) -> Iterator[Any]:
    from kraft_spark.client import NewRecord

    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed below, lines are streamed
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
    with fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CommandError(f"{where}: invalid JSON ({exc.msg})") from exc
            if not isinstance(item, dict):
                raise CommandError(f"{where}: expected an object with key, value, headers")
            unknown = set(item) - {"key", "value", "headers"}
            if unknown:
                raise CommandError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
            key = item.get("key")
            if not isinstance(key, str):
                raise CommandError(f"{where}: \"key\" must be a string")
            value = item.get("value")
            data = None if value is None else (
                value.encode() if isinstance(value, str)
                else json.dumps(value, separators=(",", ":")).encode()
            )
            headers = item.get("headers") or {}
            if not isinstance(headers, dict) or not all(
                isinstance(v, str | None) for v in headers.values()
            ):
                raise CommandError(f"{where}: \"headers\" must map names to strings")
            yield NewRecord(
                key.encode(), data,
                tuple((k, None if v is None else v.encode()) for k, v in headers.items()),
            )


def _append(args: argparse.Namespace) -> int:
    from kraft_spark.client import NewRecord

    if args.file is not None:
        if args.key is not None or args.value is not None or args.tombstone:
            raise CommandError("use either --file or --key/--value, not both")
        records = list(_records_from_file(args.file))
        if not records:
            raise CommandError(f"{args.file} holds no records")
    else:
        if args.key is None or (args.value is None) == (not args.tombstone):
            raise CommandError("give --key and exactly one of --value or --tombstone "
                               "(or --file F.jsonl)")
        value = None if args.tombstone else args.value.encode()
        records = [NewRecord(args.key.encode(), value)]

    async def go(client: Any) -> int:
        for start in range(0, len(records), FILE_BATCH):
            chunk = records[start : start + FILE_BATCH]
            result = await client.append(chunk, timeout_s=args.timeout)
            for i, rec in enumerate(chunk):
                key = _text(rec.key)
                offset = result.base_offset + i
                if args.json:
                    print(json.dumps({"key": key, "offset": offset, "epoch": result.epoch}))
                else:
                    print(f"key={key} offset={offset} epoch={result.epoch}")
            sys.stdout.flush()
        return 0

    code: int = _run(args, go)
    return code


# ------------------------------------------------------------------------------ read


def _read(args: argparse.Namespace) -> int:
    if args.from_offset < 0:
        raise CommandError("--from-offset must be ≥ 0")
    if args.limit is not None and args.limit < 1:
        raise CommandError("--limit must be ≥ 1")

    async def go(client: Any) -> int:
        offset, printed = args.from_offset, 0
        hw = (await client.describe_quorum()).high_watermark
        while offset < hw and (args.limit is None or printed < args.limit):
            want = 1000 if args.limit is None else min(1000, args.limit - printed)
            batch = await client.read(offset, want)
            if not batch:
                break
            for rec in batch:
                headers = {k: _text(v) for k, v in rec.headers}
                if args.json:
                    print(json.dumps({
                        "offset": rec.offset, "epoch": rec.epoch, "timestamp": rec.timestamp_ms,
                        "key": _text(rec.key), "value": _text(rec.value), "headers": headers,
                    }))
                else:
                    extra = f" headers={headers}" if headers else ""
                    print(f"offset={rec.offset} epoch={rec.epoch} key={_text(rec.key)} "
                          f"value={_text(rec.value)}{extra}")
            printed += len(batch)
            offset = batch[-1].offset + 1
        return 0

    code: int = _run(args, go)
    return code


# ------------------------------------------------------------------------------ describe


def _describe(args: argparse.Namespace) -> int:
    from kraft_spark.quorum_report import (
        format_replication,
        format_status,
        replication_rows,
        status_summary,
    )

    async def go(client: Any) -> Any:
        return await client.describe_quorum()

    info = _run(args, go)
    if args.status:
        summary = status_summary(info)
        print(json.dumps(summary) if args.json else format_status(summary))
    else:
        rows = replication_rows(info)
        if args.json:
            print(json.dumps(rows))
        else:
            print(format_replication(rows, args.human_readable, int(time.time() * 1000)))
    return 0

