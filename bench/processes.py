"""Stopping a process started in a session of its own (``start_new_session=True``), as the
benchmarks and the process-level tests start ``kraft-spark local`` / ``run``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
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
