"""Disk faults in the simulator: ENOSPC and EIO on append and on fsync, and bit rot.

While a fault is in force on a node, its log's appends and flushes fail
(``MemoryLog.failing``). The simulated shell does what the real node does
(``kraft_spark.net.storage_failure``): the process stops at the first failure, losing what was
not fsync'd, and its supervisor starts it again a second later; while the fault lasts it fails
again at its first write. The invariants must hold throughout and liveness must return once the
fault clears.

Bit rot (``bit-rot``) spoils one durable batch of a node's log: reading it raises the
``CorruptSegmentError`` a real segment's CRC check raises. The simulated shell does what the
real one does (``kraft_spark.net.log_repair``): the node stops, and its restart cuts the log at
the damaged batch, fetches the rest again and does not vote until it has caught up (the disk-loss
rule; the checker excuses it from the majority meanwhile, as a node whose disk was lost).

Injected shell bug (``--inject-bug ignore-fsync-error``, "fsyncgate"): the shell reports a
failed fsync as a success and carries on. The kernel dropped the dirty pages with the failed
fsync, so records the node acknowledged are on no disk; the durability checks catch it.
"""

from __future__ import annotations

import errno
import os
from typing import Final

from kraft_spark.log.errors import CorruptSegmentError, LogError
from kraft_spark.raft.records import Batch

DISK_BUGS: Final = ("ignore-fsync-error",)
ERRNOS: Final = ("ENOSPC", "EIO")
# The supervisor's delay before it starts a node that stopped on a storage failure.
RESTART_AFTER_US: Final = 1_000_000


def disk_error(name: str, what: str) -> LogError:
    """The error a real log raises: ``<what> failed: [Errno N] <strerror>``."""
    code = getattr(errno, name)
    return LogError(f"simulated disk: {what} failed: [Errno {code}] {os.strerror(code)}")


def check_rot(rotten: set[int], batches: list[Batch]) -> None:
    """Raise as a CRC check would on the first rotten batch among ``batches``."""
    for batch in batches:
        if batch.base_offset in rotten:
            raise CorruptSegmentError("<simulated segment>", 0, batch.base_offset,
                                      "CRC mismatch (simulated bit rot)")
