"""Errors shared across the project's command line."""

from __future__ import annotations


class CommandError(Exception):
    """A user-facing failure: printed as one line on stderr, exit code 2 unless given."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
