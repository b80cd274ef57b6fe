"""The application's progress lines on stderr (what a user of ``kraft-spark run`` watches)."""

from __future__ import annotations

import contextlib
import sys


def progress(message: str) -> None:
    print(f"[kraft-spark] {message}", file=sys.stderr, flush=True)


def failure_of(exc: BaseException) -> str:
    """One line naming why a Spark job failed: the JVM's own message for a Py4JJavaError
    (whose first line only says which method was called), e.g. Spark's "Job aborted due to
    stage failure: ... worker lost: 127.0.0.3:40199 got disassociated"."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            message = str(java.getMessage() or java.toString())
            return " ".join(message.split())[:300]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"
