"""The ``kraft-spark`` command line.

Each command lives in its own module exposing ``register(subparsers)``; the module sets
``func`` on its parser, which receives the parsed arguments and returns the exit code.
Commands never print a traceback for a user error: they raise ``CommandError`` with one line
that names the cause and the fix.

A command's modules are imported only when it runs (``COMMANDS``): a node, a client command or
the simulator does not pay for the others' imports at every start (the simulator's and the
benchmarks' alone cost a node ~0.1 s). ``--help``, a missing or an unknown command load none:
the top level is built from ``SUMMARIES`` (each command's one-line help, which
tests/commands/test_cli_commands.py checks against what its module registers).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from kraft_spark.errors import CommandError

__all__ = ["CommandError", "build_parser", "main"]

# Modules that contribute sub-commands, in the order they appear in --help.
COMMAND_MODULES = [
    "kraft_spark.commands.run",
    "kraft_spark.commands.pack_env",
    "kraft_spark.commands.resize",
    "kraft_spark.commands.local",
    "kraft_spark.commands.node",
    "kraft_spark.commands.client_cmds",
    "kraft_spark.commands.kv",
    "kraft_spark.commands.lease",
    "kraft_spark.commands.lock",
    "kraft_spark.commands.elect",
    "kraft_spark.commands.sql",
    "kraft_spark.log.commands",
    "bench.command",
    "kraft_spark.sim.command",
    "kraft_spark.sim.bug_sweep",
]

# The modules that register each command, in COMMAND_MODULES's order (``bench`` gathers its
# benchmarks from two). tests/commands/test_cli_commands.py checks it against the modules.
COMMANDS: dict[str, tuple[str, ...]] = {
    "run": ("kraft_spark.commands.run",),
    "pack-env": ("kraft_spark.commands.pack_env",),
    "resize": ("kraft_spark.commands.resize",),
    "local": ("kraft_spark.commands.local",),
    "node": ("kraft_spark.commands.node",),
    "append": ("kraft_spark.commands.client_cmds",),
    "read": ("kraft_spark.commands.client_cmds",),
    "metadata-quorum": ("kraft_spark.commands.client_cmds",),
    "kv": ("kraft_spark.commands.kv",),
    "lease": ("kraft_spark.commands.lease",),
    "lock": ("kraft_spark.commands.lock",),
    "elect": ("kraft_spark.commands.elect",),
    "sql": ("kraft_spark.commands.sql",),
    "format": ("kraft_spark.log.commands",),
    "dump-log": ("kraft_spark.log.commands",),
    "bench": ("kraft_spark.log.commands", "bench.command"),
    "sim": ("kraft_spark.sim.command",),
    "sim-bugs": ("kraft_spark.sim.bug_sweep",),
}


# Each command's one-line help in ``kraft-spark --help``, in COMMAND_MODULES's order: the same
# text its module registers (tests/commands/test_cli_commands.py checks), kept here so that the
# top-level help imports no command module.
SUMMARIES: dict[str, str] = {
    "run": "run the Spark application (local mode, 3 voters, Delta tables, HTTP)",
    "pack-env": "build the environment archive for a cluster's executors (venv-pack)",
    "resize": "resize the running Spark application's quorum (KIP-853), live",
    "local": "run a local quorum (one child process per voter)",
    "node": "run one quorum node (voter or observer) from a properties file",
    "append": "append records and wait until committed",
    "read": "print committed data records",
    "metadata-quorum": "describe the quorum (like kafka-metadata-quorum.sh)",
    "kv": "read, write, compare-and-set and watch keys (like etcdctl)",
    "lease": "grant, keep alive, inspect (timetolive), revoke and list leases",
    "lock": "run a command while holding a lock (like etcdctl lock)",
    "elect": "campaign in an election and hold leadership, or observe it (like etcdctl elect)",
    "sql": "query the Delta tables with Spark SQL",
    "format": "write meta.properties into a log directory (once per node and directory)",
    "dump-log": "print the record batches of a segment or log directory",
    "bench": "benchmarks that print a table",
    "sim": "run the consensus core under the deterministic simulator",
    "sim-bugs": "check that each injected bug is caught on ranges of seeds drawn at random",
}


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments end with one line on stderr (what is wrong and where to look), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _command_of(argv: Sequence[str] | None) -> str | None:
    """The command ``argv`` names: its first argument that is not an option (the top-level
    parser takes no option but ``--help``)."""
    return next((arg for arg in argv or () if not arg.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: with the modules of the command it names only. When it names
    none, or one this table does not know, every command is a stub built from ``SUMMARIES``
    (enough for ``--help``, and for the error naming the choices) and no module is imported.
    No ``argv`` at all: the whole parser, every module's (the reference pages walk it)."""
    parser = OneLineParser(
        prog="kraft-spark",
        description="A Spark-native replicated metadata store (Kafka's KRaft quorum).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    command = None if argv is None else _command_of(argv)
    if argv is None or command in COMMANDS:
        for name in COMMAND_MODULES if argv is None else COMMANDS[command or ""]:
            importlib.import_module(name).register(subparsers)
    else:
        for name, summary in SUMMARIES.items():
            subparsers.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from kraft_spark.commands.directory_args import join_directory_ids

    argv = join_directory_ids(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    try:
        if getattr(args, "endpoint_warehouse", None):
            from kraft_spark.app_endpoint import resolve_args

            resolve_args(args)  # --warehouse URI: the address the running application recorded
        if hasattr(args, "token_file"):
            from kraft_spark.commands.http_token import resolve_token

            resolve_token(args)  # --token-file, $KRAFT_SPARK_HTTP_TOKEN, <data-dir>/...
        code: int = args.func(args)
    except CommandError as exc:
        print(f"kraft-spark {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
