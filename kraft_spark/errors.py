"""Errors shared across the project's command line."""

from __future__ import annotations

import os
import sys


class CommandError(Exception):
    """A user-facing failure: printed as one line on stderr, exit code 2 unless given."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def silence_stdout() -> None:
    """The reader of stdout went away (``| head``): point stdout at /dev/null so that later
    prints and Python's final flush of what is still buffered do not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
