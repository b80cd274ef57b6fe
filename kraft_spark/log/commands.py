"""Storage commands: ``format``, ``dump-log`` and ``bench storage``.

``bench`` is a command group; other modules add their benchmarks to it with
``bench_subparsers(subparsers)``, which returns the group's sub-parsers whichever module
registered it first.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

_BENCH_ACTION = "_kraft_bench_subparsers"


def register(subparsers: Any) -> None:
    fmt = subparsers.add_parser(
        "format",
        help="write meta.properties into a log directory (once per node and directory)",
        description="Format a log directory: meta.properties (version, cluster.id, node.id, a "
        "new directory.id) and the __cluster_metadata-0 partition directory.",
    )
    fmt.add_argument("--cluster-id", required=True, help="the cluster's id (A-Z a-z 0-9 . _ -)")
    fmt.add_argument("--node-id", required=True, type=int, help="this node's id (≥ 0)")
    fmt.add_argument("--log-dir", required=True, help="the node's log directory (log.dirs)")
    fmt.add_argument(
        "--ignore-formatted", action="store_true",
        help="succeed if the directory is already formatted for this cluster and node",
    )
    fmt.set_defaults(func=_format)

    dump = subparsers.add_parser(
        "dump-log",
        help="print the record batches of a segment or log directory",
        description="Print every batch (like Kafka's dump-log); exit 1 at the first invalid "
        "batch, naming its file, position and offset.",
    )
    dump.add_argument("path", help="a .log segment, a partition directory or a log directory")
    dump.add_argument("--print-data", action="store_true", help="print every record too")
    dump.set_defaults(func=_dump_log)

    storage = bench_subparsers(subparsers).add_parser(
        "storage",
        help="append with an fsync per batch, read back, compare with the raw fsync floor",
    )
    storage.add_argument("--dir", required=True, help="working directory (the log stays there)")
    storage.add_argument("--records", type=int, default=50_000)
    storage.add_argument("--batch", type=int, default=1000, help="records per batch")
    storage.add_argument("--value-bytes", type=int, default=100)
    storage.add_argument("--segment-bytes", type=int, default=None)
    storage.add_argument(
        "--no-preallocate", dest="preallocate", action="store_false",
        help="do not reserve each segment's size at its first append (a node does, by default: "
        "kraft.log.preallocate)",
    )
    storage.add_argument("--json", action="store_true", help="end with one JSON line")
    storage.set_defaults(func=_bench_storage)


def bench_subparsers(subparsers: Any) -> Any:
    """The sub-parsers of the ``bench`` group, creating the group on first use."""
    parser = subparsers.choices.get("bench")
    if parser is None:
        parser = subparsers.add_parser("bench", help="benchmarks that print a table")
        action = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
        setattr(parser, _BENCH_ACTION, action)
    return getattr(parser, _BENCH_ACTION)


def _format(args: argparse.Namespace) -> int:
    from kraft_spark.errors import CommandError
    from kraft_spark.log.errors import LogError
    from kraft_spark.log.meta import format_log_dir

    try:
        meta = format_log_dir(
            args.log_dir, cluster_id=args.cluster_id, node_id=args.node_id,
            ignore_formatted=args.ignore_formatted,
        )
    except (LogError, ValueError, OSError) as exc:
        raise CommandError(str(exc)) from exc
    print(
        f"Formatted {args.log_dir}: cluster.id={meta.cluster_id} node.id={meta.node_id} "
        f"directory.id={meta.directory_id}"
    )
    return 0


def _dump_log(args: argparse.Namespace) -> int:
    from kraft_spark.errors import CommandError, silence_stdout
    from kraft_spark.log.dump import dump

    try:
        invalid = dump(args.path, sys.stdout, print_data=args.print_data)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader (e.g. `head`) went away: stop quietly
        silence_stdout()
        return 0
    except OSError as exc:
        raise CommandError(str(exc)) from exc
    if invalid is not None:
        raise CommandError(invalid.message(), exit_code=1)
    return 0


def _bench_storage(args: argparse.Namespace) -> int:
    from kraft_spark.errors import CommandError
    from kraft_spark.log.bench import run_storage_bench
    from kraft_spark.log.errors import LogError
    from kraft_spark.log.segmented_log import DEFAULT_SEGMENT_BYTES

    try:
        result = run_storage_bench(
            args.dir, records=args.records, batch=args.batch, value_bytes=args.value_bytes,
            segment_bytes=args.segment_bytes or DEFAULT_SEGMENT_BYTES,
            preallocate=args.preallocate,
        )
    except (LogError, ValueError, OSError) as exc:
        raise CommandError(str(exc)) from exc
    print(result.table())
    if args.json:
        print(json.dumps(result.as_json(), sort_keys=True))
    return 0
