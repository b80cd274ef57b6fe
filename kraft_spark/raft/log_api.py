"""The log as the consensus core sees it: an injected object, never opened by the core.

The core writes through ``append`` and ``truncate_to``; those writes are visible to reads at once
but are **not durable** until the shell calls ``flush`` (the Ready names the offset to flush to).
A crash may lose any write that was not flushed. Implementations: ``kraft_spark.log`` (segmented
Kafka-format files) in the real node, and the simulator's log on a simulated disk.

Offsets are Kafka's: ``end_offset`` is the next offset to write. Epochs start at 1; epoch 0 with
offset 0 describes an empty log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kraft_spark.raft.records import Batch


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    offset: int
    epoch: int


class RaftLog(Protocol):
    def start_offset(self) -> int:
        """The first offset the log holds (KIP-630's log start offset): 0 until retention
        deletes old segments or a snapshot is installed; the records below it are in the
        node's snapshots."""
        ...

    def end_offset(self) -> int:
        """The next offset to be written (the start offset for an empty log)."""
        ...

    def last_epoch(self) -> int:
        """The epoch of the last batch, 0 for an empty log."""
        ...

    def flushed_offset(self) -> int:
        """Every offset below this one is durable."""
        ...

    def append(self, batch: Batch) -> None:
        """Append one whole batch at ``end_offset()``; its epoch is ≥ ``last_epoch()``."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (a batch boundary); durable on flush."""
        ...

    def truncate_fully_to(self, offset: int) -> None:
        """Replace the whole log by an empty one starting at ``offset`` (a snapshot ending at
        ``offset`` was installed); durable when it returns."""
        ...

    def flush(self) -> int:
        """Make every write durable; returns the new flushed offset."""
        ...

    def read(self, start_offset: int, max_bytes: int) -> list[Batch]:
        """Whole batches from the one containing ``start_offset``; at least one batch if any
        exists, then more while the total stays within ``max_bytes``."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """For the largest epoch ≤ ``epoch`` present in the log, that epoch and its end offset
        (the start of the next epoch, or the log end). ``OffsetAndEpoch(0, 0)`` if none."""
        ...
