"""The ``kraft-spark`` command line.

Each command lives in its own module exposing ``register(subparsers)``; the module sets
``func`` on its parser, which receives the parsed arguments and returns the exit code.
Commands never print a traceback for a user error: they raise ``CommandError`` with one line
that names the cause and the fix.

A command's modules are imported only when it runs (``COMMANDS``): a node, a client command or
the simulator does not pay for the others' imports at every start (the simulator's and the
benchmarks' alone cost a node ~0.1 s). ``--help``, a missing or an unknown command load them all.
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
    "lock": ("kraft_spark.commands.lease",),
    "sql": ("kraft_spark.commands.sql",),
    "format": ("kraft_spark.log.commands",),
    "dump-log": ("kraft_spark.log.commands",),
    "bench": ("kraft_spark.log.commands", "bench.command"),
    "sim": ("kraft_spark.sim.command",),
    "sim-bugs": ("kraft_spark.sim.bug_sweep",),
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
    """The parser for ``argv``: with the modules of the command it names only (all of them
    when it names none, or one this table does not know)."""
    parser = OneLineParser(
        prog="kraft-spark",
        description="A Spark-native replicated metadata store (Kafka's KRaft quorum).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    command = _command_of(argv)
    for name in COMMANDS.get(command, COMMAND_MODULES) if command else COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from kraft_spark.commands.directory_args import join_directory_ids

    argv = join_directory_ids(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    try:
        from kraft_spark.app_endpoint import resolve_args
        from kraft_spark.commands.http_token import resolve_token

        resolve_args(args)  # --warehouse URI: the address the running application recorded
        resolve_token(args)  # --token-file, $KRAFT_SPARK_HTTP_TOKEN, <data-dir>/http-credentials
        code: int = args.func(args)
    except CommandError as exc:
        print(f"kraft-spark {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
