"""The real segmented log (``kraft_spark.log``) on the simulated disk, for ``--log segmented``.

Reads are served by ``SegmentedLog`` running on a ``SimulatedFileSystem`` — the same code as in
the real node, so the simulation exercises its encoding, indexes, epoch cache and crash
recovery. A ``MemoryLog`` mirror receives the same writes and flushes; it is the checker's model
of what must survive a crash. After every simulated crash the real log is reopened (running its
recovery) and must hold at least everything the model says was durable: an fsync'd record lost
by the real code is reported as a violation.
"""

from __future__ import annotations

import errno
import random

from kraft_spark.log.segmented_log import SegmentedLog
from kraft_spark.log.simfs import SimulatedFileSystem
from kraft_spark.raft.log_api import OffsetAndEpoch
from kraft_spark.raft.records import Batch
from kraft_spark.sim.invariants import InvariantViolation
from kraft_spark.sim.memlog import MemoryLog

LOG_DIR = "/log"
SEGMENT_BYTES = 16 * 1024  # small, so runs roll segments often
# As a real node (kraft.log.preallocate's default): crashes then leave preallocated tails of
# zeros behind the last batch, and torn writes inside them, for recovery to tell apart.
PREALLOCATE = True


def _open(fs: SimulatedFileSystem) -> SegmentedLog:
    return SegmentedLog.open(fs, LOG_DIR, segment_bytes=SEGMENT_BYTES, preallocate=PREALLOCATE)


class DiskLog(MemoryLog):
    """A MemoryLog (the model) whose RaftLog operations also drive the real log."""

    def __init__(
        self, fs: SimulatedFileSystem, real: SegmentedLog, model: list[Batch],
        start_epoch: int = 0,
    ) -> None:
        self.fs = fs
        self.real = real
        super().__init__(model, real.start_offset(), start_epoch)

    @classmethod
    def fresh(cls) -> DiskLog:
        fs = SimulatedFileSystem()
        return cls(fs, _open(fs), [])

    # The disk fault in force goes to the simulated disk: the real log's writes, fsyncs and
    # renames (its checkpoints) fail there, and it raises its LogError as on a real disk.
    @property
    def failing(self) -> str | None:
        return None if self.fs.fail_with is None else errno.errorcode[self.fs.fail_with]

    @failing.setter
    def failing(self, name: str | None) -> None:
        self.fs.fail_with = None if name is None else getattr(errno, name)

    # RaftLog: reads from the real log, writes to both.
    def start_offset(self) -> int:
        return self.real.start_offset()

    def end_offset(self) -> int:
        return self.real.end_offset()

    def last_epoch(self) -> int:
        return self.real.last_epoch()

    def read_unchecked(self, start_offset: int, max_bytes: int) -> list[Batch]:
        return self.real.read(start_offset, max_bytes)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return self.real.end_offset_for_epoch(epoch)

    def append(self, batch: Batch) -> None:
        self.real.append(batch)
        super().append(batch)

    def truncate_to(self, offset: int) -> None:
        self.real.truncate_to(offset)
        super().truncate_to(offset)
        # The real log makes a truncation durable before returning; so does the model.
        super().flush()

    def truncate_fully_to(self, offset: int, epoch: int = 0) -> None:
        self.real.truncate_fully_to(offset)
        super().truncate_fully_to(offset, epoch)

    def advance_start_offset(self, offset: int, epoch: int = 0) -> int:
        start = self.real.advance_start_offset(offset)
        super().advance_start_offset(start, epoch)
        return start

    def flush(self) -> int:
        self.real.flush()
        return super().flush()

    def crashed(self, rng: random.Random, torn: bool) -> DiskLog:
        model = super().crashed(random.Random(0), False)  # exactly the fsync'd image
        self.fs.crash(rng, torn)
        # Recovery runs on a disk that works (a simplification: a restart on a disk that still
        # fails is the supervisor's retry, modelled by the cluster's restart after a second).
        fault, self.fs.fail_with = self.fs.fail_with, None
        try:
            real = _open(self.fs)
        finally:
            self.fs.fail_with = fault
        recovered = real.read(0, 1 << 62) if real.end_offset() else []
        durable = model.batches()
        if recovered[: len(durable)] != durable:
            raise InvariantViolation(
                "committed-durable",
                f"the segmented log recovered {len(recovered)} batches that do not start with "
                f"the {len(durable)} batches it had fsync'd",
            )
        log = DiskLog(self.fs, real, recovered, model.durable_start_epoch())
        log.rotten = {b for b in self.rotten if b < log.end_offset()}  # on the medium
        # The recovered log may differ from the model beyond the durable image (torn writes):
        # the checker must re-verify it from the durable point.
        log.durable_truncated_to = model.end_offset()
        return log
