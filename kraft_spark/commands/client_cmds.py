"""Client commands: ``append``, ``read``, ``metadata-quorum`` (like kafka-metadata-quorum.sh).

Each finds the leader by itself from any node given in ``--bootstrap-controller`` (or
``--bootstrap-server``, its synonym), retries while an election is in progress, and ends with
one line on stderr and a non-zero exit code when the quorum stays unreachable.

Values: ``--key K --value V`` are stored as the bytes given on the command line (the UTF-8
text K and V in a UTF-8 locale). In a ``--file`` of JSON lines, a string value is stored as its
UTF-8 text, any other JSON value as its compact JSON text, and ``null`` is a tombstone (it
deletes the key in the ``snapshot`` table).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

from kraft_spark import aio
from kraft_spark.commands.quorum_admin import register_actions
from kraft_spark.errors import CommandError, silence_stdout

if TYPE_CHECKING:  # the client is imported when a command runs, to keep --help quick
    from kraft_spark.client import ClientError, CommittedRecord, NewRecord

# The default --command-config, as etcdctl takes ETCDCTL_* for its flags: set it once per shell.
COMMAND_CONFIG_ENV = "KRAFT_SPARK_COMMAND_CONFIG"
FILE_BATCH = 500  # at most this many records per append when reading --file


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
    read.add_argument("--from-offset", type=int, default=0,
                      help="the first offset to print (default 0: the log's start)")
    read.add_argument("--limit", type=int, default=None, help="at most this many records")
    read.add_argument("--json", action="store_true", help="print JSON lines")
    read.set_defaults(func=_read)

    quorum = subparsers.add_parser(
        "metadata-quorum", help="describe the quorum (like kafka-metadata-quorum.sh)"
    )
    _bootstrap(quorum, add_controller=True)
    actions = quorum.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = actions.add_parser("describe", help="status or replication of the quorum")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true",
                      help="the leader, epoch, high watermark and voters (kafka-metadata-quorum "
                      "describe --status)")
    what.add_argument("--replication", action="store_true",
                      help="every replica's log end offset and lag, and when the leader last "
                      "heard from it")
    describe.add_argument("--human-readable", action="store_true",
                          help="timestamps as 'N ms ago'")
    describe.add_argument("--json", action="store_true", help="print JSON")
    describe.set_defaults(func=_describe)
    register_actions(actions, _run)


def _bootstrap(parser: argparse.ArgumentParser, *, add_controller: bool = False) -> None:
    # Kafka's tools take one of the two flags. Every node here is a controller that also
    # answers a broker's admin requests, so both mean the same: any node(s) of the quorum.
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]",
                       help="any node(s) of the quorum")
    where.add_argument("--bootstrap-server", dest="bootstrap_controller",
                       metavar="HOST:PORT[,...]", help="the same (Kafka's flag for brokers)")
    parser.add_argument("--command-config", metavar="FILE",
                        default=os.environ.get(COMMAND_CONFIG_ENV) or None,
                        help="client properties with Kafka's names (security.protocol, "
                        "sasl.mechanism, sasl.jaas.config): how to authenticate, e.g. "
                        "<data-dir>/admin.properties"
                        + ("; add-controller: the new controller's properties file"
                           if add_controller else "")
                        + f" (default: ${COMMAND_CONFIG_ENV})")
    parser.add_argument("--timeout", type=_seconds, default=15.0,
                        help="seconds to keep retrying while no leader answers (default 15)")


def _seconds(text: str) -> float:
    """A finite number of seconds above 0: NaN or inf would retry forever, and 0 or less gives
    up on an append before its commit can be confirmed (though it may still commit)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return value


def _run(args: argparse.Namespace, make: Any) -> Any:
    """Run ``make(client)`` with a client, mapping client errors to one-line command errors."""
    from kraft_spark.client import AsyncQuorumClient, ClientError
    from kraft_spark.client.security import ClientSecurity
    from kraft_spark.raft.config import ConfigError

    try:
        security = (ClientSecurity.from_file(args.command_config) if args.command_config
                    else ClientSecurity())
    except ConfigError as exc:
        raise CommandError(f"--command-config: {exc}") from None

    async def main() -> Any:
        try:
            client = AsyncQuorumClient(args.bootstrap_controller, retry_budget_s=args.timeout,
                                       request_timeout_s=min(5.0, args.timeout),
                                       **security.client_kwargs())
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        try:
            return await make(client)
        finally:
            await client.close()

    try:
        return aio.run(main())
    except ClientError as exc:
        raise _command_error(exc) from exc


def _command_error(exc: ClientError) -> CommandError:
    """Exit 1 (retry later) for a client error, 2 (fix the command) when no endpoint is a quorum
    node at all (they answered in HTTP)."""
    from kraft_spark.client import AuthenticationError, NotKafkaEndpointError

    if isinstance(exc, NotKafkaEndpointError):
        return CommandError(f"{exc} (--bootstrap-controller)")
    if isinstance(exc, AuthenticationError):
        return CommandError(f"{exc}: pass --command-config <data-dir>/admin.properties (or "
                            f"set ${COMMAND_CONFIG_ENV} to it)")
    return CommandError(str(exc), exit_code=1)


class _Output:
    """Result lines on stdout that stop quietly, never failing the command, once the reader
    has gone (as ``dump-log`` does); ``gone`` tells a command to stop producing them."""

    def __init__(self) -> None:
        self.gone = False

    def line(self, text: str) -> None:
        self._write(lambda: print(text))

    def flush(self) -> None:
        self._write(sys.stdout.flush)

    def _write(self, write: Callable[[], object]) -> None:
        if self.gone:
            return
        try:
            write()
        except BrokenPipeError:
            self.gone = True
            silence_stdout()


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


# ------------------------------------------------------------------------------ append


@cache
def _max_batch_bytes() -> int:
    """The leader refuses a batch larger than this (``max_batch_bytes`` has no property, so
    every node runs with the default)."""
    from kraft_spark.raft.config import QuorumConfig

    return QuorumConfig().max_batch_bytes


def _record_size(record: NewRecord) -> int:
    """The record's size as the leader counts it against ``max_batch_bytes``."""
    from kraft_spark.raft.records import Record

    return Record(key=record.key, value=record.value, headers=record.headers).size_estimate()


def _check_size(record: NewRecord, where: str) -> None:
    """Refuse a record that no batch can hold before anything goes to the network."""
    size, limit = _record_size(record), _max_batch_bytes()
    if size > limit:
        raise CommandError(f"{where}: the record is {size} bytes, above the quorum's limit of "
                           f"{limit} bytes per batch; make its value smaller")


def _utf8(text: str, where: str, name: str) -> bytes:
    """JSON may escape a lone surrogate (``"\\ud800"``), which UTF-8 cannot encode."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CommandError(f"{where}: {name} holds a lone surrogate escape (\\u"
                           f"{ord(text[exc.start]):04x}), which is not UTF-8 text") from exc


def _file_lines(path: str) -> Iterator[tuple[str, str]]:
    """``(path:N, text)`` for each non-blank line. Read as bytes and decoded line by line, so
    a line that is not UTF-8 is named exactly (a text-mode file decodes ahead in chunks)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, lines are streamed
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
    with fh:
        for number, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CommandError(f"{path}: line {number} is not UTF-8 text (invalid byte "
                                   f"0x{raw[exc.start]:02x} at byte {exc.start + 1} of the "
                                   "line); save the file as UTF-8") from exc
            if line.strip():
                yield f"{path}:{number}", line


def _record_from_line(where: str, line: str) -> NewRecord:
    from kraft_spark.client import NewRecord

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
        _utf8(value, where, '"value"') if isinstance(value, str)
        # json.dumps escapes non-ASCII text, lone surrogates included: always encodable.
        else json.dumps(value, separators=(",", ":")).encode()
    )
    headers = item.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(v, str | None) for v in headers.values()
    ):
        raise CommandError(f"{where}: \"headers\" must map names to strings")
    pairs: list[tuple[str, bytes | None]] = []
    for name, text in headers.items():
        _utf8(name, where, "a header name")  # names go on the wire as UTF-8 too
        pairs.append((name, None if text is None else _utf8(text, where, f"header {name!r}")))
    return NewRecord(_utf8(key, where, '"key"'), data, tuple(pairs))


def _records_from_file(path: str) -> Iterator[NewRecord]:
    for where, line in _file_lines(path):
        record = _record_from_line(where, line)
        _check_size(record, where)
        yield record


def _records_from_args(args: argparse.Namespace) -> list[NewRecord]:
    from kraft_spark.client import NewRecord

    if args.key is None or (args.value is None) == (not args.tombstone):
        raise CommandError("give --key and exactly one of --value or --tombstone "
                           "(or --file F.jsonl)")
    # os.fsencode gives back the bytes typed: argv that is not UTF-8 reaches Python
    # surrogate-escaped, and keys and values are bytes on the wire anyway.
    value = None if args.tombstone else os.fsencode(args.value)
    record = NewRecord(os.fsencode(args.key), value)
    _check_size(record, "--key/--value")
    return [record]


def _chunks(records: list[NewRecord], max_bytes: int) -> Iterator[list[NewRecord]]:
    """Consecutive runs of at most FILE_BATCH records and ``max_bytes`` as the leader counts
    them, so that no append is refused for its size (each record alone fits, checked before)."""
    chunk: list[NewRecord] = []
    size = 0
    for record in records:
        record_size = _record_size(record)
        if chunk and (len(chunk) == FILE_BATCH or size + record_size > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(record)
        size += record_size
    if chunk:
        yield chunk


def _append(args: argparse.Namespace) -> int:
    from kraft_spark.client import ClientError

    if args.file is not None:
        if args.key is not None or args.value is not None or args.tombstone:
            raise CommandError("use either --file or --key/--value, not both")
        # Every line is checked before the first append, so a bad line appends nothing.
        records = list(_records_from_file(args.file))
        if not records:
            raise CommandError(f"{args.file} holds no records")
    else:
        records = _records_from_args(args)
    out = _Output()

    async def go(client: Any) -> int:
        done = 0
        for chunk in _chunks(records, _max_batch_bytes()):
            try:
                result = await client.append(chunk, timeout_s=args.timeout)
            except ClientError as exc:
                if done:  # earlier chunks are committed: say so, a blind retry duplicates them
                    raise ClientError(f"{exc} (the first {done} of {len(records)} records were "
                                      "appended before this)") from exc
                raise
            # Appending is the job: once the reader of stdout is gone, keep appending unseen.
            for i, rec in enumerate(chunk):
                _print_ack(out, args.json, _text(rec.key), result.base_offset + i, result.epoch)
            out.flush()
            done += len(chunk)
        return 0

    code: int = _run(args, go)
    return code


def _print_ack(out: _Output, as_json: bool, key: str | None, offset: int, epoch: int) -> None:
    if as_json:
        out.line(json.dumps({"key": key, "offset": offset, "epoch": epoch}))
    else:
        out.line(f"key={key} offset={offset} epoch={epoch}")


# ------------------------------------------------------------------------------ read


def _read(args: argparse.Namespace) -> int:
    if args.from_offset < 0:
        raise CommandError("--from-offset must be ≥ 0")
    if args.limit is not None and args.limit < 1:
        raise CommandError("--limit must be ≥ 1")
    out = _Output()

    async def go(client: Any) -> int:
        offset, printed = args.from_offset, 0
        hw = (await client.describe_quorum()).high_watermark
        while offset < hw and (args.limit is None or printed < args.limit) and not out.gone:
            want = 1000 if args.limit is None else min(1000, args.limit - printed)
            batch = await client.read(offset, want)
            if not batch:
                break
            for rec in batch:
                _print_record(out, args.json, rec)
            printed += len(batch)
            offset = batch[-1].offset + 1
        out.flush()
        return 0

    code: int = _run(args, go)
    return code


def _print_record(out: _Output, as_json: bool, rec: CommittedRecord) -> None:
    headers = {k: _text(v) for k, v in rec.headers}
    if as_json:
        out.line(json.dumps({
            "offset": rec.offset, "epoch": rec.epoch, "timestamp": rec.timestamp_ms,
            "key": _text(rec.key), "value": _text(rec.value), "headers": headers,
        }))
    else:
        extra = f" headers={headers}" if headers else ""
        out.line(f"offset={rec.offset} epoch={rec.epoch} key={_text(rec.key)} "
                 f"value={_text(rec.value)}{extra}")


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
    out = _Output()
    if args.status:
        summary = status_summary(info)
        out.line(json.dumps(summary) if args.json else format_status(summary))
    else:
        rows = replication_rows(info)
        if args.json:
            out.line(json.dumps(rows))
        else:
            out.line(format_replication(rows, args.human_readable, int(time.time() * 1000)))
    out.flush()
    return 0
