"""The application's progress lines on stderr (what a user of ``kraft-spark run`` watches)."""

from __future__ import annotations

import sys


def progress(message: str) -> None:
    print(f"[kraft-spark] {message}", file=sys.stderr, flush=True)
