"""Stopping a process started in a session of its own (``start_new_session=True``), as the
benchmarks and the process-level tests start ``kraft-spark local`` / ``run``; and running a
server (an object store) for the length of a ``with`` block."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any


def stop_group(proc: subprocess.Popen[Any], timeout_s: float) -> int:
    """SIGTERM (a graceful stop of everything it runs), SIGKILL of its process group after
    ``timeout_s``; closes its stdout pipe; returns its exit code."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    return code


@contextlib.contextmanager
def serving(argv: list[str], port: int, what: str, timeout_s: float = 30) -> Iterator[None]:
    """Run ``argv`` in a session of its own until it listens on 127.0.0.1:``port``
    (``timeout_s`` at most; RuntimeError naming ``what`` otherwise); ``stop_group`` it
    afterwards."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port}") from None
                time.sleep(0.05)
        yield
    finally:
        stop_group(proc, 10)
