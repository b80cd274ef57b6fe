"""``kraft-spark run``: the main job (the Spark application with its embedded defaults).

The Spark application is built by a later issue; until then this command says so plainly
instead of pretending to start something.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="run the Spark application (local mode, 3 voters, Delta tables, HTTP)"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    print(
        "kraft-spark run: the Spark application is not built yet (see the Spark hosting issue). "
        "What runs today: `kraft-spark sim` (the consensus core under the deterministic "
        "simulator).",
        file=sys.stderr,
    )
    return 1
