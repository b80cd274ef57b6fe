"""Disk faults in the simulator: ENOSPC and EIO on append and on fsync.

While a fault is in force on a node, its log's appends and flushes fail
(``MemoryLog.failing``). The simulated shell does what the real node does
(``kraft_spark.net.storage_failure``): the process stops at the first failure, losing what was
not fsync'd, and its supervisor starts it again a second later; while the fault lasts it fails
again at its first write. The invariants must hold throughout and liveness must return once the
fault clears.

Injected shell bug (``--inject-bug ignore-fsync-error``, "fsyncgate"): the shell reports a
failed fsync as a success and carries on. The kernel dropped the dirty pages with the failed
fsync, so records the node acknowledged are on no disk; the durability checks catch it.
"""

from __future__ import annotations

import errno
import os
from typing import Final

from kraft_spark.log.errors import LogError

DISK_BUGS: Final = ("ignore-fsync-error",)
ERRNOS: Final = ("ENOSPC", "EIO")
# The supervisor's delay before it starts a node that stopped on a storage failure.
RESTART_AFTER_US: Final = 1_000_000


def disk_error(name: str, what: str) -> LogError:
    """The error a real log raises: ``<what> failed: [Errno N] <strerror>``."""
    code = getattr(errno, name)
    return LogError(f"simulated disk: {what} failed: [Errno {code}] {os.strerror(code)}")
