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
    voters = fmt.add_mutually_exclusive_group()
    voters.add_argument("--standalone", action="store_true",
                        help="KIP-853: this node alone is the initial voter set (give --listener)")
    voters.add_argument("--initial-controllers", metavar="ID@HOST:PORT:DIRID,...",
                        help="KIP-853: the initial voters; this node takes its listed directory id")
    voters.add_argument("--no-initial-controllers", action="store_true",
                        help="KIP-853: no initial voter set (the default): the node joins as an "
                             "observer and is added with add-controller")
    fmt.add_argument("--listener", metavar="HOST:PORT",
                     help="with --standalone: where this node's Raft listener is")
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
    storage.add_argument("--records", type=int, default=50_000,
                         help="records to append (default 50,000)")
    storage.add_argument("--batch", type=int, default=1000, help="records per batch")
    storage.add_argument("--value-bytes", type=int, default=100,
                         help="bytes of each record's value (default 100)")
    storage.add_argument("--segment-bytes", type=int, default=None,
                         help="roll the log's segments at this size (default: a node's)")
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
    from kraft_spark.properties import parse_endpoint
    from kraft_spark.raft.config import ConfigError
    from kraft_spark.raft.voter_set import (
        Endpoint,
        Voter,
        VoterSet,
        directory_text,
        parse_directory,
    )
    from kraft_spark.state.bootstrap_checkpoint import (
        parse_initial_controllers,
        write_bootstrap_checkpoint,
    )

    voters = None
    directory = None
    try:
        if args.initial_controllers:
            voters = parse_initial_controllers(args.initial_controllers)
            mine = voters.get(args.node_id)
            directory = directory_text(mine.directory_id) if mine is not None else None
        elif args.standalone and not args.listener:
            raise CommandError("--standalone needs --listener HOST:PORT (this node's Raft "
                               "listener, written into the initial voter set)")
        meta = format_log_dir(
            args.log_dir, cluster_id=args.cluster_id, node_id=args.node_id,
            ignore_formatted=args.ignore_formatted, directory_id=directory,
        )
        if args.standalone:
            host, port = parse_endpoint(args.listener, "--listener")
            voters = VoterSet((Voter(args.node_id, parse_directory(meta.directory_id),
                                     (Endpoint("CONTROLLER", host, port),)),))
        written = write_bootstrap_checkpoint(args.log_dir, voters) if voters else None
    except (LogError, ValueError, OSError, ConfigError) as exc:
        raise CommandError(str(exc)) from exc
    print(
        f"Formatted {args.log_dir}: cluster.id={meta.cluster_id} node.id={meta.node_id} "
        f"directory.id={meta.directory_id}"
    )
    if written is not None and voters is not None:
        print(f"Wrote the bootstrap checkpoint {written}: voters {voters.describe()}")
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
